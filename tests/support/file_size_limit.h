// Sets RLIMIT_FSIZE for the scope: a file may not grow beyond `bytes`, so writes past it fail
// (EFBIG) the way a full disk fails them (ENOSPC); SIGXFSZ is ignored meanwhile. The limit is the
// whole process's: gtest runs tests one after another, so only the test in the scope sees it.
#pragma once

#include <sys/resource.h>

#include <csignal>

namespace dtrain::testing {

class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*saved_handler_)(int) = nullptr;
};

}  // namespace dtrain::testing
