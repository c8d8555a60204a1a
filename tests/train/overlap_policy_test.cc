// parallel.overlap's resolution: "auto" overlaps only when every rank's compute threads and its
// communication thread fit on the process's CPUs and on the host's; "true" and "false" force it.
#include "dtrain/train/strategies/data_parallel/overlap_policy.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

// ranks in the process, processes on the host, threads per rank, process CPUs, host CPUs.
OverlapInputs inputs(int ranks, int processes, int threads, int process_cpus, int host_cpus) {
  return {ranks, processes, threads, process_cpus, host_cpus};
}

bool auto_overlap(const OverlapInputs& in) { return decide_overlap("auto", in).overlap; }

TEST(OverlapPolicy, AutoOverlapsWhenTheCommunicationThreadsHaveCpus) {
  EXPECT_FALSE(auto_overlap(inputs(2, 1, 1, 2, 2)));  // this 2-CPU VM, 2 workers
  EXPECT_TRUE(auto_overlap(inputs(2, 1, 1, 4, 4)));
  EXPECT_FALSE(auto_overlap(inputs(2, 1, 2, 4, 4)));
  EXPECT_TRUE(auto_overlap(inputs(2, 1, 2, 6, 6)));
  EXPECT_TRUE(auto_overlap(inputs(1, 1, 1, 2, 2)));
  EXPECT_FALSE(auto_overlap(inputs(1, 1, 1, 1, 1)));
  EXPECT_FALSE(auto_overlap(inputs(8, 1, 1, 15, 15)));
  EXPECT_TRUE(auto_overlap(inputs(8, 1, 1, 16, 16)));
}

TEST(OverlapPolicy, ProcessesShareTheHost) {
  // mpirun -np 2, unbound, 1 worker each: 2 ranks on a 2-CPU host.
  EXPECT_FALSE(auto_overlap(inputs(1, 2, 1, 2, 2)));
  EXPECT_TRUE(auto_overlap(inputs(1, 2, 1, 4, 4)));
  // Bound to one core each (Open MPI's default for 2 processes): no CPU for the communication.
  EXPECT_FALSE(auto_overlap(inputs(1, 2, 1, 1, 64)));
  // Bound to 2 cores each on a 4-CPU host.
  EXPECT_TRUE(auto_overlap(inputs(1, 2, 1, 2, 4)));
  EXPECT_FALSE(auto_overlap(inputs(2, 2, 1, 4, 6)));
}

TEST(OverlapPolicy, ForcedSettingsIgnoreTheCpus) {
  EXPECT_TRUE(decide_overlap("true", inputs(4, 1, 1, 1, 1)).overlap);
  EXPECT_FALSE(decide_overlap("false", inputs(1, 1, 1, 64, 64)).overlap);
  EXPECT_EQ(decide_overlap("true", inputs(4, 1, 1, 1, 1)).reason, "on");
  EXPECT_EQ(decide_overlap("false", inputs(1, 1, 1, 64, 64)).reason, "off");
}

TEST(OverlapPolicy, TheReasonSaysWhy) {
  EXPECT_EQ(decide_overlap("auto", inputs(2, 1, 1, 2, 2)).reason,
            "off (auto: 2 ranks in this process x (1 compute + 1 communication thread) exceed its "
            "2 CPUs)");
  EXPECT_EQ(decide_overlap("auto", inputs(1, 2, 1, 2, 2)).reason,
            "off (auto: 2 ranks on this host x (1 compute + 1 communication thread) exceed its 2 "
            "CPUs)");
  EXPECT_EQ(decide_overlap("auto", inputs(1, 1, 3, 4, 4)).reason,
            "on (auto: 1 rank on this host x (3 compute + 1 communication thread) fit its 4 CPUs)");
}

TEST(OverlapPolicy, RejectsWhatConfigWouldHaveCaught) {
  EXPECT_THROW(decide_overlap("sometimes", inputs(1, 1, 1, 1, 1)), InternalError);
  EXPECT_THROW(decide_overlap("auto", inputs(0, 1, 1, 1, 1)), InternalError);
}

TEST(OverlapPolicy, MeasuresThisMachine) {
  const OverlapInputs in = overlap_inputs(3, 2);
  EXPECT_EQ(in.ranks_in_process, 3);
  EXPECT_EQ(in.threads_per_rank, 2);
  EXPECT_GE(in.process_cpus, 1);
  EXPECT_LE(in.process_cpus, in.host_cpus);
  EXPECT_GE(in.processes_on_host, 1);
}

}  // namespace
}  // namespace dtrain::train
