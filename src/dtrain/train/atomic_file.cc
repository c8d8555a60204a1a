#include "dtrain/train/atomic_file.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

// Closes the descriptor on every path out of write_file_atomically.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now and reports the result (close can report a delayed write error).
  int close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

std::string system_reason() { return std::strerror(errno); }

}  // namespace

void write_file_atomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = fmt::format("{}.tmp", path);
  // What a failure leaves: the old file as it was, or no file.
  std::error_code ec;
  const std::string left = std::filesystem::exists(path, ec)
                               ? fmt::format("the previous {} is unchanged", path)
                               : fmt::format("{} was not created", path);
  auto fail = [&](const std::string& what) {
    const int code = errno;
    const std::string reason = system_reason();
    ::unlink(tmp.c_str());
    throw FileWriteError(
        fmt::format("cannot write {}: {} {} failed: {}; {}", path, what, tmp, reason, left), code);
  };
  FileDescriptor fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    const int code = errno;
    const std::string reason = system_reason();
    throw FileWriteError(
        fmt::format("cannot write {}: creating {} failed: {}; {}", path, tmp, reason, left), code);
  }
  std::size_t written = 0;
  while (written < bytes.size()) {
    const ssize_t n = ::write(fd.get(), bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // no progress and no reason given: do not report a stale errno
    if (n <= 0) fail("writing");
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd.get()) != 0) fail("fsync of");
  if (fd.close() != 0) fail("closing");
  if (::rename(tmp.c_str(), path.c_str()) != 0) fail("renaming");
  // Make the rename itself durable. Failing to open the folder (unusual permissions) does not make
  // the file any less complete, so it is not an error.
  std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (folder.empty()) folder = std::filesystem::current_path();
  const int dir_fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd >= 0) {
    ::fsync(dir_fd);
    ::close(dir_fd);
  }
}

std::string read_whole_file(const std::string& path) {
  // One read into a string of the file's size (a restart reads its checkpoint here: no stream
  // buffer and no second copy).
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error(fmt::format("cannot open {}: {}", path, system_reason()));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    throw Error(fmt::format("cannot read {}: {}", path, system_reason()));
  }
  // One byte more than the file, so that the read that sees its end needs no reallocation.
  std::string bytes(static_cast<std::size_t>(info.st_size) + 1, '\0');
  std::size_t done = 0;
  for (;;) {
    if (done == bytes.size()) bytes.resize(bytes.size() * 2);  // the file grew meanwhile
    const ssize_t n = ::read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw Error(fmt::format("cannot read {}: {}", path, system_reason()));
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

MappedFile::MappedFile(const std::string& path) {
  FileDescriptor fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) throw Error(fmt::format("cannot open {}: {}", path, system_reason()));
  struct stat info {};
  if (::fstat(fd.get(), &info) != 0) {
    throw Error(fmt::format("cannot read {}: {}", path, system_reason()));
  }
  size_ = static_cast<std::size_t>(info.st_size);
  if (size_ == 0) return;  // mmap refuses a length of 0
  void* mapped = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (mapped == MAP_FAILED) {
    copy_ = read_whole_file(path);
    size_ = copy_.size();
    return;
  }
  mapped_ = mapped;
}

MappedFile::~MappedFile() {
  if (mapped_ != nullptr) ::munmap(mapped_, size_);
}

std::string_view MappedFile::bytes() const {
  if (mapped_ == nullptr) return copy_;
  return {static_cast<const char*>(mapped_), size_};
}

std::optional<FileIdentity> file_identity(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return FileIdentity{static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
                      static_cast<std::int64_t>(st.st_size),
                      static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                          static_cast<std::int64_t>(st.st_mtim.tv_nsec)};
}

bool written_since(const std::string& path, const std::optional<FileIdentity>& before) {
  const std::optional<FileIdentity> now = file_identity(path);
  return now.has_value() && now != before;
}

}  // namespace dtrain::train
