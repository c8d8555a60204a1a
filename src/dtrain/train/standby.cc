#include "dtrain/train/standby.h"

#include <fcntl.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "dtrain/base/stop_request.h"

namespace dtrain::train {
namespace {

int standby_fd() {
  const char* text = std::getenv("DTRAIN_STANDBY_FD");
  if (text == nullptr || *text == '\0') return -1;
  char* end = nullptr;
  const long fd = std::strtol(text, &end, 10);
  return *end == '\0' && fd >= 0 ? static_cast<int>(fd) : -1;
}

// The process's name before name_standby_process (the kernel's comm: 15 characters at most).
char original_name[16] = {};

// Names the process (its main thread, whatever thread calls this): /proc/self/comm is the
// thread-group leader's.
void rename_process(const char* name) {
  const int fd = open("/proc/self/comm", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return;  // a name is a convenience: the standby works without it
  const ssize_t written = write(fd, name, std::strlen(name));
  static_cast<void>(written);
  close(fd);
}

// Set once the supervisor woke this process: from then on it is the run, not a standby (an
// in-process restart does not warm up again).
std::atomic<bool> activated{false};

}  // namespace

bool is_standby() { return !activated.load() && standby_fd() >= 0; }

void name_standby_process() {
  if (!is_standby()) return;
  prctl(PR_GET_NAME, original_name, 0, 0, 0);
  prctl(PR_SET_NAME, "dtrain-standby", 0, 0, 0);
}

void wait_until_activated() {
  static std::once_flag once;
  std::call_once(once, [] {
    const int fd = standby_fd();
    if (fd < 0) return;
    char go = 0;
    ssize_t got = 0;
    do {
      got = read(fd, &go, 1);
      // SIGTERM / SIGINT (the stop handlers turn them into a request): a standby has nothing
      // to save, it just goes.
      if (got < 0 && errno == EINTR && stop_requested() != 0) _exit(0);
    } while (got < 0 && errno == EINTR);
    close(fd);
    if (got != 1) _exit(0);  // the supervisor went away or dismissed this standby
    activated.store(true);
    if (original_name[0] != '\0') rename_process(original_name);
  });
}

}  // namespace dtrain::train
