// Errors and invariant checks.
//
// Policy (docs/ARCHITECTURE.md, "Errors"): every failure a user can cause is an exception derived
// from dtrain::Error whose message says what failed, with the values, where (file, layer, key,
// rank) and, when there is one, what to do. The `dtrain` command prints `error: <message>` on one
// line and exits non-zero. DTRAIN_CHECK* are for bugs: they print both sides and the source line.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A config key that is unknown, malformed or out of range.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// A data set file that is missing, truncated or malformed.
class DataError : public Error {
 public:
  using Error::Error;
};

// Layer or tensor shapes that do not fit together.
class ShapeError : public Error {
 public:
  using Error::Error;
};

// A checkpoint that cannot be read, written or verified.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// A violated internal invariant: a bug in dtrain, not in the input.
class InternalError : public Error {
 public:
  using Error::Error;
};

// Appends `line` (a run's final `error: ...` line) to the file DTRAIN_ERROR_FILE names, when it is
// set: the supervisor of `dtrain train --max-restarts` (train/supervisor.h) logs it as the cause
// of a restart. Failures to write are ignored: the line was printed on stderr already.
void append_to_error_file(const std::string& line);

namespace detail {
[[noreturn]] void fail_check(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace dtrain

#define DTRAIN_CHECK(cond, ...)                                                   \
  do {                                                                            \
    if (!(cond)) [[unlikely]] {                                                   \
      ::dtrain::detail::fail_check(                                               \
          __FILE__, __LINE__,                                                     \
          std::string("check failed: " #cond ": ") + ::fmt::format(__VA_ARGS__)); \
    }                                                                             \
  } while (0)

#define DTRAIN_CHECK_OP_(a, b, op)                                                                 \
  do {                                                                                             \
    const auto& dtrain_check_a_ = (a);                                                             \
    const auto& dtrain_check_b_ = (b);                                                             \
    if (!(dtrain_check_a_ op dtrain_check_b_)) [[unlikely]] {                                      \
      ::dtrain::detail::fail_check(__FILE__, __LINE__,                                             \
                                   ::fmt::format("check failed: {} " #op " {} ({} vs {})", #a, #b, \
                                                 dtrain_check_a_, dtrain_check_b_));               \
    }                                                                                              \
  } while (0)

#define DTRAIN_CHECK_EQ(a, b) DTRAIN_CHECK_OP_(a, b, ==)
#define DTRAIN_CHECK_NE(a, b) DTRAIN_CHECK_OP_(a, b, !=)
#define DTRAIN_CHECK_LT(a, b) DTRAIN_CHECK_OP_(a, b, <)
#define DTRAIN_CHECK_LE(a, b) DTRAIN_CHECK_OP_(a, b, <=)
#define DTRAIN_CHECK_GT(a, b) DTRAIN_CHECK_OP_(a, b, >)
#define DTRAIN_CHECK_GE(a, b) DTRAIN_CHECK_OP_(a, b, >=)
