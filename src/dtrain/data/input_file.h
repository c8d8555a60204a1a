// A data file opened for reading whether it is raw or gzip-compressed (internal to data/).
//
// zlib's gzread passes raw files through unchanged, so every reader accepts both
// `train-images-idx3-ubyte` and `train-images-idx3-ubyte.gz`. What this class adds is the
// defence against bad input: a missing file, a corrupt or truncated gzip stream and a header
// that claims more data than the file can hold all become one-line DataErrors naming the path,
// and no reader allocates a buffer before knowing the data can be there:
//   raw file:  exactly file_size bytes can be read;
//   gzip file: deflate expands at most 1032:1, and read_up_to() grows its buffer geometrically as
//              bytes actually arrive (at most 2x the real data + 1 MiB), so a forged header costs
//              nothing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

struct gzFile_s;  // zlib's gzFile, declared here so that zlib.h stays out of this header

namespace dtrain::data {

class InputFile {
 public:
  // Opens `path`; DataError when it is missing, a directory or unreadable. `hint` ends the message
  // for a missing file (where the data set can be had).
  explicit InputFile(const std::string& path, const std::string& hint = "");
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  const std::string& path() const { return path_; }
  bool compressed() const { return compressed_; }
  // Size of the file on disk, compressed or not.
  std::uint64_t file_size() const { return file_size_; }
  // An upper bound on the bytes still to be read: exact for raw files, 1032 x file_size for gzip.
  std::uint64_t max_remaining() const;

  // Reads up to n bytes into out and returns how many arrived (fewer only at the end of the data).
  // A corrupt or truncated gzip stream is a DataError.
  std::uint64_t read(void* out, std::uint64_t n);
  // Appends up to n more bytes to `buffer` (growing it as they arrive) and returns how many came.
  std::uint64_t read_up_to(std::vector<std::uint8_t>& buffer, std::uint64_t n);
  // Everything left.
  std::vector<std::uint8_t> read_rest();
  // True when no byte is left (reads one byte ahead to find out).
  bool at_end();

 private:
  std::string path_;
  gzFile_s* file_ = nullptr;
  bool compressed_ = false;
  std::uint64_t file_size_ = 0;
  std::uint64_t consumed_ = 0;
  bool has_peeked_ = false;
  std::uint8_t peeked_ = 0;
};

// Where Debian puts the demo data set, for the messages about missing IDX files.
inline constexpr const char* kFashionMnistHint =
    "Debian's dataset-fashion-mnist package provides Fashion-MNIST under "
    "/usr/share/datasets/fashion-mnist/ (apt-get install dataset-fashion-mnist)";

}  // namespace dtrain::data
