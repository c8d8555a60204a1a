#include "dtrain/base/error.h"

namespace dtrain::detail {

void fail_check(const char* file, int line, const std::string& message) {
  throw InternalError(fmt::format("{} at {}:{} (this is a bug in dtrain; please report it)",
                                  message, file, line));
}

}  // namespace dtrain::detail
