// Logging to stderr with a `[rank r/n]` prefix once ranks exist.
//
// Levels: debug < info < warn < error; the threshold comes from DTRAIN_LOG_LEVEL or set_level().
// The rank prefix is per thread, because ranks may be threads of one process.
#pragma once

#include <fmt/format.h>

#include <string>
#include <string_view>

namespace dtrain::log {

enum class Level { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_level(Level level);
Level level();
// Parses "debug", "info", "warn", "error" or "off"; throws ConfigError naming the accepted values.
Level parse_level(std::string_view text);

// Sets the prefix of this thread's log lines to `[rank r/n]`; rank < 0 removes it.
void set_rank(int rank, int size);

void write(Level level, std::string_view message);

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::kDebug) write(Level::kDebug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::kInfo) write(Level::kInfo, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::kWarn) write(Level::kWarn, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void error(fmt::format_string<Args...> format, Args&&... args) {
  if (level() <= Level::kError) write(Level::kError, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace dtrain::log
