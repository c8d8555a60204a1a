// parallel.overlap's resolution: "auto" overlaps only when every rank's compute threads and its
// communication thread fit on the CPUs; "true" and "false" force it.
#include "dtrain/train/overlap_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

TEST(OverlapPolicy, AutoOverlapsWhenTheCommunicationThreadsHaveCpus) {
  // ranks x (threads + 1) against cpus.
  EXPECT_FALSE(decide_overlap("auto", 2, 1, 2).overlap);  // this 2-CPU VM, 2 workers
  EXPECT_TRUE(decide_overlap("auto", 2, 1, 4).overlap);
  EXPECT_FALSE(decide_overlap("auto", 2, 2, 4).overlap);
  EXPECT_TRUE(decide_overlap("auto", 2, 2, 6).overlap);
  EXPECT_TRUE(decide_overlap("auto", 1, 1, 2).overlap);
  EXPECT_FALSE(decide_overlap("auto", 1, 1, 1).overlap);
  EXPECT_FALSE(decide_overlap("auto", 8, 1, 15).overlap);
  EXPECT_TRUE(decide_overlap("auto", 8, 1, 16).overlap);
}

TEST(OverlapPolicy, ForcedSettingsIgnoreTheCpus) {
  EXPECT_TRUE(decide_overlap("true", 4, 1, 1).overlap);
  EXPECT_FALSE(decide_overlap("false", 1, 1, 64).overlap);
  EXPECT_EQ(decide_overlap("true", 4, 1, 1).reason, "on");
  EXPECT_EQ(decide_overlap("false", 1, 1, 64).reason, "off");
}

TEST(OverlapPolicy, TheReasonSaysWhy) {
  EXPECT_EQ(
      decide_overlap("auto", 2, 1, 2).reason,
      "off (auto: 2 ranks on this host x (1 compute + 1 communication thread) exceed 2 CPUs)");
  EXPECT_EQ(decide_overlap("auto", 1, 3, 4).reason,
            "on (auto: 1 rank on this host x (3 compute + 1 communication thread) fit 4 CPUs)");
}

TEST(OverlapPolicy, RejectsWhatConfigWouldHaveCaught) {
  EXPECT_THROW(decide_overlap("sometimes", 1, 1, 1), InternalError);
  EXPECT_THROW(decide_overlap("auto", 0, 1, 1), InternalError);
}

TEST(OverlapPolicy, SeesAtLeastOneCpuAndOneProcess) {
  EXPECT_GE(cpus_available(), 1);
  EXPECT_GE(processes_on_host(), 1);
}

}  // namespace
}  // namespace dtrain::train
