#include "dtrain/base/memory_info.h"

#include <gtest/gtest.h>

namespace dtrain {
namespace {

TEST(MemoryInfo, ParsesMemAvailableInKilobytes) {
  const char* meminfo =
      "MemTotal:       24684084 kB\nMemFree:         1000000 kB\nMemAvailable:   23920264 kB\n";
  EXPECT_EQ(parse_mem_available(meminfo), std::int64_t{23920264} * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 5 kB\n"), std::nullopt);
}

TEST(MemoryInfo, ParsesCgroupLimits) {
  EXPECT_EQ(parse_cgroup_bytes("max\n"), std::nullopt);
  EXPECT_EQ(parse_cgroup_bytes(""), std::nullopt);
  EXPECT_EQ(parse_cgroup_bytes("2147483648\n"), std::int64_t{2147483648});
}

TEST(MemoryInfo, TakesTheSmallerFigureAndSaysWhich) {
  const AvailableMemory cgroup = smaller_available(8000, 3000, "cgroup");
  EXPECT_TRUE(cgroup.known);
  EXPECT_EQ(cgroup.bytes, 3000);
  EXPECT_EQ(cgroup.source, "cgroup");
  const AvailableMemory kernel = smaller_available(2000, 3000, "cgroup");
  EXPECT_EQ(kernel.bytes, 2000);
  EXPECT_EQ(kernel.source, "MemAvailable");
  EXPECT_FALSE(smaller_available(std::nullopt, std::nullopt, "cgroup").known);
  // A group already above its limit leaves nothing, not a negative figure.
  EXPECT_EQ(smaller_available(8000, -5, "cgroup").bytes, 0);
}

TEST(MemoryInfo, ReadsThisMachine) {
  const AvailableMemory available = available_memory();
  EXPECT_TRUE(available.known);
  EXPECT_GT(available.bytes, 0);
}

TEST(MemoryInfo, FormatsBytes) {
  EXPECT_EQ(format_bytes(512), "512 bytes");
  EXPECT_EQ(format_bytes(8000000000), "7.45 GiB (8000000000 bytes)");
}

}  // namespace
}  // namespace dtrain
