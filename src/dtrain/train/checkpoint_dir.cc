#include "dtrain/train/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <system_error>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

// N of "epoch-N.ckpt", or -1 for any other name.
std::int64_t epoch_of(const std::string& file_name) {
  constexpr std::string_view kPrefix = "epoch-";
  constexpr std::string_view kSuffix = ".ckpt";
  if (file_name.size() <= kPrefix.size() + kSuffix.size() ||
      file_name.compare(0, kPrefix.size(), kPrefix) != 0 ||
      file_name.compare(file_name.size() - kSuffix.size(), kSuffix.size(), kSuffix) != 0) {
    return -1;
  }
  const char* begin = file_name.data() + kPrefix.size();
  const char* end = file_name.data() + file_name.size() - kSuffix.size();
  std::int64_t epoch = -1;
  const auto [ptr, ec] = std::from_chars(begin, end, epoch);
  if (ec != std::errc() || ptr != end) return -1;
  return epoch;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string folder, std::int64_t keep)
    : folder_(std::move(folder)), keep_(keep) {}

std::string CheckpointDir::save(const Checkpoint& checkpoint, std::int64_t epoch) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) {
    throw CheckpointError(
        fmt::format("cannot create checkpoint folder {}: {}", folder_, ec.message()));
  }
  const std::string name = fmt::format("epoch-{}.ckpt", epoch);
  const std::string path = (fs::path(folder_) / name).string();
  write_checkpoint(path, checkpoint);
  try {
    write_file_atomically((fs::path(folder_) / "latest").string(), name + "\n");
  } catch (const Error& e) {
    throw CheckpointError(e.what());
  }
  if (keep_ > 0) {
    auto files = list();
    const auto excess = static_cast<std::int64_t>(files.size()) - keep_;
    for (std::int64_t i = 0; i < excess; ++i) {
      if (files[static_cast<std::size_t>(i)] != path)
        fs::remove(files[static_cast<std::size_t>(i)], ec);
    }
  }
  return path;
}

std::string CheckpointDir::latest_path() const {
  const std::string pointer = (fs::path(folder_) / "latest").string();
  std::string text;
  try {
    text = read_whole_file(pointer);
  } catch (const Error&) {
    throw CheckpointError(
        fmt::format("no checkpoint to resume from: {} is missing (a run writes it after its first "
                    "checkpoint; see train.checkpoint_every)",
                    pointer));
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  if (epoch_of(text) < 0) {
    throw CheckpointError(fmt::format(
        "{} should name a checkpoint file like epoch-3.ckpt but holds '{}'", pointer, text));
  }
  const std::string path = (fs::path(folder_) / text).string();
  if (!fs::exists(path)) {
    throw CheckpointError(fmt::format("{} names {}, which does not exist", pointer, path));
  }
  return path;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<std::int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    const std::int64_t epoch = epoch_of(entry.path().filename().string());
    if (epoch >= 0) found.emplace_back(epoch, entry.path().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [epoch, path] : found) paths.push_back(std::move(path));
  return paths;
}

}  // namespace dtrain::train
