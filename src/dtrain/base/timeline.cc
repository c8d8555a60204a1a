#include "dtrain/base/timeline.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <ctime>
#include <string>

namespace dtrain {

bool timeline_enabled() {
  const char* path = std::getenv("DTRAIN_TIMELINE");
  return path != nullptr && *path != '\0';
}

void timeline_mark(std::string_view event) {
  // Read each time (not cached): cheap next to the file's open and write.
  const char* path = std::getenv("DTRAIN_TIMELINE");
  if (path == nullptr || *path == '\0') return;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const std::string line = fmt::format("{}.{:09d} {} {}\n", static_cast<long long>(now.tv_sec),
                                       static_cast<long>(now.tv_nsec), getpid(), event);
  const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return;  // a diagnostic never costs the run
  const ssize_t written = write(fd, line.data(), line.size());
  static_cast<void>(written);
  close(fd);
}

}  // namespace dtrain
