#include "dtrain/data/input_file.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string_view>
#include <system_error>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

// Deflate's largest possible expansion (a run of one byte), rounded up.
constexpr std::uint64_t kMaxGzipRatio = 1032;
// The least read_up_to grows a buffer by for gzip input.
constexpr std::uint64_t kMinGrowStep = std::uint64_t{1} << 20;
// gzread counts in unsigned int.
constexpr std::uint64_t kMaxGzread = std::uint64_t{1} << 30;

}  // namespace

InputFile::InputFile(const std::string& path, const std::string& hint) : path_(path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) {
    throw DataError(
        fmt::format("data file {} does not exist{}{}", path, hint.empty() ? "" : "; ", hint));
  }
  if (std::filesystem::is_directory(status)) {
    throw DataError(
        fmt::format("data file {} is a directory, not a file; give the file's path", path));
  }
  file_size_ = std::filesystem::file_size(path, ec);
  if (ec) {
    throw DataError(fmt::format("cannot read the size of data file {}: {}", path, ec.message()));
  }
  errno = 0;
  file_ = gzopen(path.c_str(), "rb");
  if (file_ == nullptr) {
    throw DataError(
        fmt::format("cannot open data file {}: {}; check its permissions", path,
                    errno != 0 ? std::generic_category().message(errno) : "out of memory"));
  }
  gzbuffer(file_, 1u << 18);
  // gzdirect right after gzopen looks at the first bytes: 0 means a gzip stream follows.
  compressed_ = gzdirect(file_) == 0;
}

InputFile::~InputFile() {
  if (file_ != nullptr) gzclose_r(file_);
}

std::uint64_t InputFile::max_remaining() const {
  if (!compressed_) return file_size_ > consumed_ ? file_size_ - consumed_ : 0;
  const std::uint64_t bound = file_size_ * kMaxGzipRatio;
  return bound > consumed_ ? bound - consumed_ : 0;
}

std::uint64_t InputFile::read(void* out, std::uint64_t n) {
  auto* target = static_cast<std::uint8_t*>(out);
  std::uint64_t got = 0;
  if (n > 0 && has_peeked_) {
    target[0] = peeked_;
    has_peeked_ = false;
    got = 1;
  }
  while (got < n) {
    const auto chunk = static_cast<unsigned>(std::min(n - got, kMaxGzread));
    const int count = gzread(file_, target + got, chunk);
    if (count > 0) got += static_cast<std::uint64_t>(count);
    int code = Z_OK;
    std::string_view message = gzerror(file_, &code);
    if (code != Z_OK) {
      // zlib prefixes its message with the path, which ours already names.
      if (message.starts_with(path_ + ": ")) message.remove_prefix(path_.size() + 2);
      if (code == Z_BUF_ERROR) {
        throw DataError(fmt::format(
            "data file {}: the gzip stream is truncated (zlib: {}); the file is incomplete: "
            "download it again",
            path_, message));
      }
      throw DataError(fmt::format(
          "data file {}: corrupt gzip stream (zlib: {}); the file is damaged: download it again "
          "(gzip -t tests it)",
          path_, message));
    }
    if (count <= 0 || static_cast<unsigned>(count) < chunk) break;
  }
  consumed_ += got;
  return got;
}

std::uint64_t InputFile::read_up_to(std::vector<std::uint8_t>& buffer, std::uint64_t n) {
  std::uint64_t got = 0;
  while (got < n) {
    // Raw files: what is left, exactly. Gzip: double what has arrived, so the buffer never
    // exceeds twice the real data plus kMinGrowStep whatever the header claimed.
    const std::uint64_t ahead = compressed_ ? std::max<std::uint64_t>(kMinGrowStep, buffer.size())
                                            : std::max<std::uint64_t>(max_remaining(), 1);
    const std::uint64_t step = std::min(n - got, ahead);
    const std::size_t old_size = buffer.size();
    buffer.resize(old_size + step);
    const std::uint64_t count = read(buffer.data() + old_size, step);
    got += count;
    if (count < step) {
      buffer.resize(old_size + count);
      break;
    }
  }
  return got;
}

std::vector<std::uint8_t> InputFile::read_rest() {
  std::vector<std::uint8_t> bytes;
  if (!compressed_) bytes.reserve(max_remaining());
  read_up_to(bytes, UINT64_MAX);
  return bytes;
}

bool InputFile::at_end() {
  if (has_peeked_) return false;
  std::uint8_t byte = 0;
  if (read(&byte, 1) == 0) return true;
  // Un-read the byte: it stays counted in consumed_ and is handed out first by the next read.
  consumed_ -= 1;
  peeked_ = byte;
  has_peeked_ = true;
  return false;
}

}  // namespace dtrain::data
