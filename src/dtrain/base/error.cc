#include "dtrain/base/error.h"

#include <cstdio>
#include <cstdlib>

namespace dtrain {

void append_to_error_file(const std::string& line) {
  const char* path = std::getenv("DTRAIN_ERROR_FILE");
  if (path == nullptr || *path == '\0') return;
  if (std::FILE* file = std::fopen(path, "a")) {
    std::fprintf(file, "%s\n", line.c_str());
    std::fclose(file);
  }
}

namespace detail {

void fail_check(const char* file, int line, const std::string& message) {
  throw InternalError(
      fmt::format("{} at {}:{} (this is a bug in dtrain; please report it)", message, file, line));
}

}  // namespace detail
}  // namespace dtrain
