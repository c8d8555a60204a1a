// Helpers for the data/ tests: a temporary directory and writers of small IDX and CIFAR-10 files,
// raw or gzip-compressed through zlib, so that each test builds exactly the (good or malformed)
// file it reads back.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::data::fixture {

// A fresh directory under the system temp folder, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("dtrain_data_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline void write_raw(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

inline void write_gzip(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr) << "cannot open " << path;
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())),
              static_cast<int>(bytes.size()));
  }
  ASSERT_EQ(gzclose(file), Z_OK);
}

// Raw when the name does not end in .gz, gzip when it does.
inline void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  if (path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0) {
    write_gzip(path, bytes);
  } else {
    write_raw(path, bytes);
  }
}

inline std::vector<std::uint8_t> read_raw(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<std::uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void append_be32(std::vector<std::uint8_t>& bytes, std::uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    bytes.push_back(static_cast<std::uint8_t>(value >> shift));
  }
}

// An IDX file: magic (0x00000800 + dims.size() for uint8), the dims, then the values.
inline std::vector<std::uint8_t> idx_bytes(std::uint32_t magic,
                                           const std::vector<std::uint32_t>& dims,
                                           const std::vector<std::uint8_t>& values) {
  std::vector<std::uint8_t> bytes;
  append_be32(bytes, magic);
  for (std::uint32_t d : dims) append_be32(bytes, d);
  bytes.insert(bytes.end(), values.begin(), values.end());
  return bytes;
}

inline std::vector<std::uint8_t> idx_u8(const std::vector<std::uint32_t>& dims,
                                        const std::vector<std::uint8_t>& values) {
  return idx_bytes(0x800u + static_cast<std::uint32_t>(dims.size()), dims, values);
}

// A deterministic pixel pattern: value of element i of sample n.
inline std::uint8_t pattern(std::int64_t n, std::int64_t i) {
  return static_cast<std::uint8_t>((n * 37 + i * 11 + 5) % 256);
}

// count images of h x w with pattern(first + n, i), as IDX values.
inline std::vector<std::uint8_t> image_values(std::int64_t first, std::int64_t count,
                                              std::int64_t pixels) {
  std::vector<std::uint8_t> values;
  for (std::int64_t n = 0; n < count; ++n) {
    for (std::int64_t i = 0; i < pixels; ++i) values.push_back(pattern(first + n, i));
  }
  return values;
}

// CIFAR-10 records: label, then 3072 pixels pattern(first + n, i).
inline std::vector<std::uint8_t> cifar_bytes(std::int64_t first,
                                             const std::vector<std::uint8_t>& labels) {
  std::vector<std::uint8_t> bytes;
  for (std::size_t n = 0; n < labels.size(); ++n) {
    bytes.push_back(labels[n]);
    for (std::int64_t i = 0; i < 3072; ++i) {
      bytes.push_back(pattern(first + static_cast<std::int64_t>(n), i));
    }
  }
  return bytes;
}

// Runs fn, expects a one-line DataError and returns its message (empty, with a test failure, when
// fn throws nothing or something else).
template <typename Fn>
std::string data_error_of(Fn&& fn) {
  try {
    fn();
  } catch (const DataError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected DataError, got another exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "expected DataError, nothing was thrown";
  return {};
}

}  // namespace dtrain::data::fixture
