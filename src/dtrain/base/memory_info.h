// How much memory this process may still take: the smaller of the kernel's MemAvailable
// (/proc/meminfo) and what the cgroup it runs in leaves (cgroup v2 memory.max - memory.current, or
// v1 memory.limit_in_bytes - memory.usage_in_bytes). Read before large allocations so that a run
// that cannot fit is refused with numbers instead of ending in std::bad_alloc or the OOM killer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dtrain {

struct AvailableMemory {
  std::int64_t bytes = 0;
  // What bounded it, for messages: "MemAvailable", "cgroup memory.max - memory.current".
  std::string source;
  bool known = false;  // false: nothing could be read (bytes is then 0 and means nothing)
};

// The bytes of the "MemAvailable:" line of /proc/meminfo text (kB), or nullopt when absent.
std::optional<std::int64_t> parse_mem_available(std::string_view meminfo);

// A cgroup limit file's content ("max\n" or a number of bytes); nullopt for "max", an empty or
// unparsable text.
std::optional<std::int64_t> parse_cgroup_bytes(std::string_view text);

// The smaller of the two figures that are known; `known` false when neither is.
AvailableMemory smaller_available(std::optional<std::int64_t> mem_available,
                                  std::optional<std::int64_t> cgroup_left,
                                  std::string_view cgroup_source);

// Reads /proc/meminfo and this process's cgroup (v2 at /sys/fs/cgroup, else v1 memory
// controller); a few small file reads.
AvailableMemory available_memory();

// "7.45 GiB (8000000000 bytes)": a byte count for messages.
std::string format_bytes(std::int64_t bytes);

}  // namespace dtrain
