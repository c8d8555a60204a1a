#include "dtrain/base/log.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dtrain/base/error.h"

namespace dtrain::log {
namespace {

Level level_from_env() {
  const char* text = std::getenv("DTRAIN_LOG_LEVEL");
  if (text == nullptr || *text == '\0') return Level::kInfo;
  try {
    return parse_level(text);
  } catch (const Error&) {
    return Level::kInfo;
  }
}

std::atomic<Level>& threshold() {
  static std::atomic<Level> value{level_from_env()};
  return value;
}

thread_local int t_rank = -1;
thread_local int t_size = 0;
std::mutex g_write_mutex;

const char* level_name(Level level) {
  switch (level) {
    case Level::kDebug: return "debug";
    case Level::kInfo: return "info";
    case Level::kWarn: return "warn";
    case Level::kError: return "error";
    case Level::kOff: return "off";
  }
  return "?";
}

}  // namespace

void set_level(Level value) { threshold().store(value); }
Level level() { return threshold().load(std::memory_order_relaxed); }

Level parse_level(std::string_view text) {
  for (Level candidate : {Level::kDebug, Level::kInfo, Level::kWarn, Level::kError, Level::kOff}) {
    if (text == level_name(candidate)) return candidate;
  }
  throw ConfigError(fmt::format("unknown log level '{}'; accepted: debug, info, warn, error, off",
                                text));
}

void set_rank(int rank, int size) {
  t_rank = rank;
  t_size = size;
}

void write(Level message_level, std::string_view message) {
  std::string line;
  if (t_rank >= 0) line = fmt::format("[rank {}/{}] ", t_rank, t_size);
  if (message_level != Level::kInfo) line += fmt::format("{}: ", level_name(message_level));
  line.append(message);
  line.push_back('\n');
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace dtrain::log
