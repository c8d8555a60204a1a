#include "dtrain/base/memory_info.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

namespace dtrain {
namespace {

std::optional<std::string> read_small_file(const char* path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ' || text.back() == '\r'))
    text.remove_suffix(1);
  return text;
}

std::optional<std::int64_t> parse_int(std::string_view text) {
  std::int64_t value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || ptr == text.data() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::int64_t> parse_mem_available(std::string_view meminfo) {
  constexpr std::string_view kKey = "MemAvailable:";
  const auto at = meminfo.find(kKey);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = meminfo.substr(at + kKey.size());
  rest = rest.substr(0, rest.find('\n'));
  rest = trim(rest);
  const auto kb = parse_int(rest.substr(0, rest.find(' ')));
  if (!kb) return std::nullopt;
  return *kb * 1024;
}

std::optional<std::int64_t> parse_cgroup_bytes(std::string_view text) {
  text = trim(text);
  if (text.empty() || text == "max") return std::nullopt;
  return parse_int(text);
}

AvailableMemory smaller_available(std::optional<std::int64_t> mem_available,
                                  std::optional<std::int64_t> cgroup_left,
                                  std::string_view cgroup_source) {
  AvailableMemory out;
  if (mem_available) {
    out = {*mem_available, "MemAvailable", true};
  }
  if (cgroup_left && (!out.known || *cgroup_left < out.bytes)) {
    out = {std::max<std::int64_t>(0, *cgroup_left), std::string(cgroup_source), true};
  }
  return out;
}

AvailableMemory available_memory() {
  std::optional<std::int64_t> mem_available;
  if (const auto meminfo = read_small_file("/proc/meminfo")) {
    mem_available = parse_mem_available(*meminfo);
  }
  std::optional<std::int64_t> cgroup_left;
  std::string source = "cgroup memory.max - memory.current";
  auto left = [](const char* limit_path, const char* usage_path) -> std::optional<std::int64_t> {
    const auto limit_text = read_small_file(limit_path);
    if (!limit_text) return std::nullopt;
    const auto limit = parse_cgroup_bytes(*limit_text);
    if (!limit) return std::nullopt;
    const auto usage_text = read_small_file(usage_path);
    const auto usage = usage_text ? parse_cgroup_bytes(*usage_text) : std::nullopt;
    return *limit - usage.value_or(0);
  };
  cgroup_left = left("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current");
  if (!cgroup_left) {
    // cgroup v1: an unlimited group reports a huge number, which never wins the minimum.
    cgroup_left = left("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                       "/sys/fs/cgroup/memory/memory.usage_in_bytes");
    source = "cgroup memory.limit_in_bytes - memory.usage_in_bytes";
  }
  return smaller_available(mem_available, cgroup_left, source);
}

std::string format_bytes(std::int64_t bytes) {
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::int64_t{1} << 30))
    return fmt::format("{:.2f} GiB ({} bytes)", b / 1073741824.0, bytes);
  if (bytes >= (std::int64_t{1} << 20))
    return fmt::format("{:.1f} MiB ({} bytes)", b / 1048576.0, bytes);
  return fmt::format("{} bytes", bytes);
}

}  // namespace dtrain
