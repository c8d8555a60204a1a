// Files that are either wholly old or wholly new: checkpoints, the `latest` pointer, summary.json.
//
// A crash or a full disk in the middle of a plain overwrite leaves a half-written file where a good
// one was. Writing to `<path>.tmp`, fsync'ing it, renaming it over `<path>` (atomic on POSIX) and
// fsync'ing the folder means a reader, even after a power cut, sees the previous complete file or
// the new complete file, never a mix.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "dtrain/base/error.h"

namespace dtrain::train {

// write_file_atomically's failure: its message, and the system's error number (ENOSPC and EDQUOT
// tell a full disk or quota from other failures).
class FileWriteError : public Error {
 public:
  FileWriteError(const std::string& what, int code) : Error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// Writes `bytes` to `path` atomically as described above. On failure the temporary file is
// removed, `path` is left as it was, and FileWriteError names the path and the system's reason.
void write_file_atomically(const std::string& path, std::string_view bytes);

// The whole content of `path`; dtrain::Error naming the path and the reason when it cannot be read.
std::string read_whole_file(const std::string& path);

// The whole of `path` mapped read-only: its bytes without a copy in this process (the page cache's
// pages). For files that are replaced by a rename and never changed in place, as
// write_file_atomically writes them: a file cut short while mapped would fault on access.
// dtrain::Error naming the path and the reason when it cannot be opened; a file that cannot be
// mapped (a file system without mmap) is read into memory instead.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  std::string_view bytes() const;

 private:
  void* mapped_ = nullptr;
  std::size_t size_ = 0;
  std::string copy_;  // when the file could not be mapped
};

// Which file `path` names now (device, inode, size, modification time), or nothing when there is
// none. write_file_atomically replaces a file by a rename, so a file written after this was taken
// is another inode: "was it written since?" is exact, where comparing modification times with this
// host's clock is not (a file server's clock may be skewed, its timestamps coarse).
struct FileIdentity {
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::int64_t size = 0;
  std::int64_t modified_ns = 0;
  bool operator==(const FileIdentity&) const = default;
};
std::optional<FileIdentity> file_identity(const std::string& path);

// Whether `path` exists and is not the file `before` identified (written since, or new).
bool written_since(const std::string& path, const std::optional<FileIdentity>& before);

}  // namespace dtrain::train
