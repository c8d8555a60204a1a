#include "dtrain/train/checkpoint_dir.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <compare>
#include <filesystem>
#include <optional>
#include <string_view>
#include <system_error>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/train/atomic_file.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

// What a checkpoint file name says, in the order files sort in.
struct CheckpointName {
  std::int64_t epoch = 0;
  bool has_step = false;
  std::int64_t step = 0;
  auto operator<=>(const CheckpointName&) const = default;
};

std::string format_name(const CheckpointName& name) {
  return name.has_step ? fmt::format("epoch-{}-step-{}.ckpt", name.epoch, name.step)
                       : fmt::format("epoch-{}.ckpt", name.epoch);
}

// A non-negative decimal number filling all of `text`.
std::optional<std::int64_t> parse_count(std::string_view text) {
  if (text.empty() || text.front() == '-' || text.front() == '+') return std::nullopt;
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// The parts of "epoch-N.ckpt" or "epoch-N-step-S.ckpt"; nullopt for any other name (including
// non-canonical spellings such as epoch-03.ckpt, so that two files never share a place).
std::optional<CheckpointName> parse_name(std::string_view file_name) {
  constexpr std::string_view kPrefix = "epoch-";
  constexpr std::string_view kSuffix = ".ckpt";
  constexpr std::string_view kStep = "-step-";
  if (file_name.size() <= kPrefix.size() + kSuffix.size() || !file_name.starts_with(kPrefix) ||
      !file_name.ends_with(kSuffix)) {
    return std::nullopt;
  }
  std::string_view middle =
      file_name.substr(kPrefix.size(), file_name.size() - kPrefix.size() - kSuffix.size());
  CheckpointName name;
  const std::size_t step_at = middle.find(kStep);
  if (step_at != std::string_view::npos) {
    const auto step = parse_count(middle.substr(step_at + kStep.size()));
    if (!step) return std::nullopt;
    name.has_step = true;
    name.step = *step;
    middle = middle.substr(0, step_at);
  }
  const auto epoch = parse_count(middle);
  if (!epoch) return std::nullopt;
  name.epoch = *epoch;
  if (format_name(name) != file_name) return std::nullopt;
  return name;
}

std::string file_name_of(const std::string& path) { return fs::path(path).filename().string(); }

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (const auto& part : parts) {
    if (!out.empty()) out += separator;
    out += part;
  }
  return out;
}

}  // namespace

CheckpointDir::CheckpointDir(std::string folder, std::int64_t keep)
    : folder_(std::move(folder)), keep_(keep) {}

std::string CheckpointDir::file_name(const Checkpoint& checkpoint) {
  CheckpointName name;
  name.epoch = checkpoint.sampler_epoch;
  name.has_step = checkpoint.sampler_position != 0;
  name.step = name.has_step ? checkpoint.global_step : 0;
  return format_name(name);
}

std::string CheckpointDir::save(const Checkpoint& checkpoint) {
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) {
    throw CheckpointError(
        fmt::format("cannot create checkpoint folder {}: {}; check that the run folder is writable",
                    folder_, ec.message()));
  }
  const std::string name = file_name(checkpoint);
  const std::string path = (fs::path(folder_) / name).string();
  const std::string bytes = encode_checkpoint(checkpoint);
  auto write = [&] {
    if (writer_) {
      writer_(path, bytes);
    } else {
      write_file_atomically(path, bytes);
    }
  };
  try {
    write();
  } catch (const FileWriteError& e) {
    const bool no_space = e.code() == ENOSPC || e.code() == EDQUOT;
    if (!no_space) {
      throw CheckpointError(
          fmt::format("{}; the earlier checkpoints in {} are intact", e.what(), folder_));
    }
    if (keep_ == 0) {
      throw CheckpointError(
          fmt::format("{}; the earlier checkpoints in {} are intact (train.keep_checkpoints = 0 "
                      "keeps every one, so none was removed to make room)",
                      e.what(), folder_));
    }
    // The kept checkpoints fill the disk, and they are pruned only after a write succeeds: make
    // room from the older ones, never the newest that verifies, and try once more.
    const auto [older, newest] = older_than_newest_complete(path);
    if (older.empty()) {
      throw CheckpointError(fmt::format(
          "{}; the earlier checkpoints in {} are intact{}", e.what(), folder_,
          newest.empty()
              ? std::string()
              : fmt::format(" ({}, the newest, is the only one to keep)", file_name_of(newest))));
    }
    std::vector<std::string> removed;
    for (const std::string& old : older) {
      std::error_code removing;
      if (fs::remove(old, removing)) removed.push_back(file_name_of(old));
    }
    if (removed.empty()) {
      throw CheckpointError(fmt::format(
          "{}; the earlier checkpoints in {} are intact (none of them could be removed to make "
          "room)",
          e.what(), folder_));
    }
    const std::string removed_text =
        fmt::format("removed {} (older than {}, the newest complete checkpoint, which is kept)",
                    join(removed, ", "), file_name_of(newest));
    try {
      write();
    } catch (const Error& again) {
      throw CheckpointError(fmt::format("{}; {} and it still does not fit; {} is intact",
                                        again.what(), removed_text, newest));
    }
    if (!said_no_space_) {
      log::warn("no space for {} in {}: {} and wrote it (said once: later saves make room alike)",
                name, folder_, removed_text);
      said_no_space_ = true;
    }
  } catch (const CheckpointError&) {
    throw;
  } catch (const Error& e) {
    throw CheckpointError(
        fmt::format("{}; the earlier checkpoints in {} are intact", e.what(), folder_));
  }
  // The checkpoint is complete from here on: nothing below may cost it.
  try {
    write_file_atomically((fs::path(folder_) / "latest").string(), name + "\n");
  } catch (const Error& e) {
    log::warn("{}; checkpoint {} itself is complete and --resume will find it", e.what(), path);
  }
  if (keep_ > 0) {
    const auto files = list();
    const auto excess = static_cast<std::int64_t>(files.size()) - keep_;
    for (std::int64_t i = 0; i < excess; ++i) {
      const std::string& old = files[static_cast<std::size_t>(i)];
      if (old != path) fs::remove(old, ec);
    }
  }
  return path;
}

VerifiedCheckpoint CheckpointDir::newest_good(Keep keep) const {
  // What `latest` says, or why it says nothing usable.
  const std::string pointer = (fs::path(folder_) / "latest").string();
  std::optional<std::string> latest_name;
  std::string latest_problem;
  std::error_code ec;
  const bool has_pointer = fs::exists(pointer, ec);
  if (!has_pointer) {
    latest_problem = fmt::format("{} is missing", pointer);
  } else {
    try {
      std::string text = read_whole_file(pointer);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
      if (!parse_name(text)) {
        latest_problem = fmt::format("{} holds '{}', not a checkpoint file name", pointer, text);
      } else if (!fs::exists(fs::path(folder_) / text, ec)) {
        latest_problem = fmt::format("{} names {}, which does not exist", pointer,
                                     (fs::path(folder_) / text).string());
      } else {
        latest_name = text;
      }
    } catch (const Error& e) {
      latest_problem = e.what();
    }
  }

  // Newest first; the first that verifies wins, whatever `latest` says (a `latest` whose own write
  // failed names an older file than the newest complete one).
  std::vector<std::string> files = list();
  std::reverse(files.begin(), files.end());
  std::vector<std::string> defects;
  for (const std::string& path : files) {
    std::optional<Checkpoint> checkpoint;
    try {
      checkpoint = read_checkpoint(path, keep);
    } catch (const CheckpointError& e) {
      defects.emplace_back(e.what());
      continue;
    }
    for (const std::string& defect : defects) {
      log::warn("{}; resuming from {} instead", defect, path);
    }
    const std::string name = file_name_of(path);
    if (!latest_name) {
      log::warn("{}; resuming from {}, the newest checkpoint that verifies", latest_problem, path);
    } else if (*latest_name != name && parse_name(*latest_name) < parse_name(name)) {
      log::warn(
          "{} names {}, but {} is newer and complete (the update of {} failed); resuming from {}",
          pointer, *latest_name, path, pointer, path);
    }
    return {path, std::move(*checkpoint)};
  }

  if (files.empty()) {
    throw CheckpointError(fmt::format(
        "no checkpoint to resume from: {} holds no checkpoint file{} (a run writes its first at "
        "the end of its first epoch; see train.checkpoint_every)",
        folder_, has_pointer ? fmt::format(" ({})", latest_problem) : ""));
  }
  throw CheckpointError(fmt::format(
      "no checkpoint in {} verifies: {}; restore a good copy into {} or start a new run with "
      "another --out",
      folder_, join(defects, "; "), folder_));
}

std::pair<std::vector<std::string>, std::string> CheckpointDir::older_than_newest_complete(
    const std::string& keep_path) const {
  const std::vector<std::string> files = list();
  for (std::size_t i = files.size(); i-- > 0;) {
    try {
      read_checkpoint(files[i], Keep::kNoFloats);
    } catch (const CheckpointError&) {
      continue;  // damaged: neither the one to keep nor, being newer, one to remove
    }
    std::vector<std::string> older;
    for (std::size_t j = 0; j < i; ++j) {
      if (files[j] != keep_path) older.push_back(files[j]);
    }
    return {older, files[i]};
  }
  return {};
}

bool CheckpointDir::has_any() const {
  std::error_code ec;
  return fs::exists(fs::path(folder_) / "latest", ec) || !list().empty();
}

bool CheckpointDir::is_older_than(const Checkpoint& checkpoint) const {
  const auto files = list();
  if (files.empty()) return true;
  return parse_name(file_name_of(files.back())) < parse_name(file_name(checkpoint));
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
  if (!parse_name(text)) {
    throw CheckpointError(fmt::format(
        "{} should name a checkpoint file like epoch-3.ckpt but holds '{}'", pointer, text));
  }
  const std::string path = (fs::path(folder_) / text).string();
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw CheckpointError(fmt::format("{} names {}, which does not exist", pointer, path));
  }
  return path;
}

std::vector<std::string> CheckpointDir::list() const {
  std::vector<std::pair<CheckpointName, std::string>> found;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder_, ec)) {
    if (const auto name = parse_name(entry.path().filename().string())) {
      found.emplace_back(*name, entry.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> paths;
  for (auto& [name, path] : found) paths.push_back(std::move(path));
  return paths;
}

}  // namespace dtrain::train
