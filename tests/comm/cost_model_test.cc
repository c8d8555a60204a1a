// The alpha-beta cost model (algorithms/cost_model.h) against seed 003's formulas, the choices
// `auto` makes from it, and the start-up measurement of alpha and beta.
#include "dtrain/comm/algorithms/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

constexpr AlphaBeta kModel{5e-6, 1e-9};  // 5 us per message, 1 GB/s
constexpr std::size_t kSegment = std::size_t{1} << 20;

double relative_error(double a, double b) { return std::abs(a - b) / std::max(std::abs(b), 1e-30); }

TEST(CostModelTest, RingIsSeedsTwoTimesPMinusOneAlphaPlusPMinusOneOverPNBeta) {
  // Seed 003, "Complexity Summary": T = 2((P-1) alpha + (P-1)/P N beta), while each block fits in
  // one segment (N <= P s).
  for (int p : {2, 3, 4, 7, 16, 64}) {
    for (double n : {4.0, 1e3, 1e6, 2e6}) {
      if (n > p * static_cast<double>(kSegment)) continue;
      const double seed = 2 * ((p - 1) * kModel.alpha + (p - 1.0) / p * n * kModel.beta);
      EXPECT_LT(relative_error(allreduce_cost("ring", p, n, kModel, kSegment), seed), 1e-12)
          << "P=" << p << " N=" << n;
    }
  }
  // Past that, each extra segment of a block costs one more alpha per step.
  const double n = 64.0 * kSegment;
  EXPECT_NEAR(allreduce_cost("ring", 4, n, kModel, kSegment),
              2 * 3 * 16 * kModel.alpha + 2 * 0.75 * n * kModel.beta, 1e-12);
}

TEST(CostModelTest, ParameterServersMatchTheSeedsVolumes) {
  for (int p : {2, 3, 8}) {
    const double n = 1e6;
    // Single master (seed: "2 Comm (P-1) * N data" through machine A).
    const double ps = allreduce_cost("parameter-server", p, n, kModel, kSegment);
    EXPECT_NEAR(ps, 2 * (p - 1) * kModel.alpha + 2 * (p - 1) * n * kModel.beta, 1e-12);
    // Sharded ("Total communication per machine: 2 (P-1) N/P").
    const double sharded = allreduce_cost("sharded-ps", p, n, kModel, kSegment);
    EXPECT_NEAR(sharded, 2 * (p - 1) * kModel.alpha + 2 * (p - 1.0) / p * n * kModel.beta, 1e-12);
    EXPECT_NEAR(sharded, allreduce_cost("ring", p, n, kModel, kSegment), 1e-12);
  }
}

TEST(CostModelTest, HalvingDoublingIsTheSeedsLogPLatencyAllreduce) {
  // Seed 003 (spatial parallelism): 2(alpha log P + beta (P-1)/P |W|) for P a power of two.
  for (int p : {2, 4, 8, 16, 64}) {
    const double n = 3e6;
    const double seed = 2 * (kModel.alpha * std::log2(p) + kModel.beta * (p - 1.0) / p * n);
    EXPECT_LT(relative_error(allreduce_cost("halving-doubling", p, n, kModel, kSegment), seed),
              1e-12);
  }
  // Otherwise the fold and unfold add 2(alpha + N beta) around the largest power of two below.
  EXPECT_NEAR(allreduce_cost("halving-doubling", 6, 1e6, kModel, kSegment),
              allreduce_cost("halving-doubling", 4, 1e6, kModel, kSegment) +
                  2 * (kModel.alpha + 1e6 * kModel.beta),
              1e-12);
}

TEST(CostModelTest, ShortHalvingDoublingIsRecursiveDoubling) {
  // Up to kRecursiveDoublingBytes the whole buffer is exchanged log2 P times: one message
  // latency per round instead of two.
  for (int p : {2, 4, 8}) {
    const double n = 64;
    EXPECT_NEAR(allreduce_cost("halving-doubling", p, n, kModel, kSegment),
                std::log2(p) * (kModel.alpha + n * kModel.beta), 1e-15);
  }
  // So for a tiny allreduce on 2 ranks it beats the ring's two latencies, and auto takes it.
  EXPECT_EQ(choose_allreduce(2, 4, kModel, kSegment), "halving-doubling");
}

TEST(CostModelTest, TreesHaveLogarithmicLatency) {
  // Seed 003, double binary tree: "log(P) rounds of communication".
  for (int p : {2, 4, 16, 64}) {
    const double small = 8;
    EXPECT_NEAR(allreduce_cost("tree", p, small, kModel, kSegment),
                2 * std::log2(p) * (kModel.alpha + small * kModel.beta), 1e-15);
    EXPECT_NEAR(allreduce_cost("double-binary-tree", p, small, kModel, kSegment),
                2 * std::log2(p) * kModel.alpha + (p == 2 ? 1 : 2) * small * kModel.beta, 1e-15);
  }
  // Large buffers: the tree moves N per level, the double tree about 2 N whatever P.
  const double n = 256e6;
  EXPECT_GT(allreduce_cost("tree", 16, n, kModel, kSegment),
            3 * allreduce_cost("double-binary-tree", 16, n, kModel, kSegment));
}

TEST(CostModelTest, HierarchicalIsGroupTreePlusLeaderRing) {
  const double n = 1e6;
  EXPECT_NEAR(
      allreduce_cost("hierarchical", 8, n, kModel, kSegment, 4),
      2 * 2 * (kModel.alpha + n * kModel.beta) + allreduce_cost("ring", 2, n, kModel, kSegment),
      1e-12);
  // One group: a tree.
  EXPECT_NEAR(allreduce_cost("hierarchical", 8, n, kModel, kSegment, 0),
              allreduce_cost("tree", 8, n, kModel, kSegment), 1e-12);
}

TEST(CostModelTest, OneRankOrEmptyBufferCostsZeroAndUnmodelledNamesThrow) {
  for (std::string_view name : auto_allreduce_candidates()) {
    EXPECT_EQ(allreduce_cost(name, 1, 1e6, kModel, kSegment), 0.0);
    EXPECT_EQ(allreduce_cost(name, 8, 0, kModel, kSegment), 0.0);
  }
  EXPECT_THROW(allreduce_cost("native", 4, 1e6, kModel, kSegment), ConfigError);
  EXPECT_THROW(allreduce_cost("auto", 4, 1e6, kModel, kSegment), ConfigError);
}

TEST(CostModelTest, ChoiceFollowsTheModelLatencyBoundSmallBandwidthBoundLarge) {
  for (int p : {2, 3, 5, 8, 16}) {
    for (double n : {4.0, 4e3, 4e5, 4e7}) {
      const std::string_view chosen = choose_allreduce(p, n, kModel, kSegment);
      const double best = allreduce_cost(chosen, p, n, kModel, kSegment);
      for (std::string_view other : auto_allreduce_candidates()) {
        EXPECT_LE(best, allreduce_cost(other, p, n, kModel, kSegment))
            << "P=" << p << " N=" << n << ": chose " << chosen << " over " << other;
      }
    }
  }
  // 16 ranks, 4 bytes: latency dominates; ring (30 alpha) loses to a log-depth algorithm.
  EXPECT_NE(choose_allreduce(16, 4, kModel, kSegment), "ring");
  EXPECT_NE(choose_allreduce(16, 4, kModel, kSegment), "parameter-server");
  // 16 ranks, 40 MB: bandwidth dominates; never the single master or the binomial tree.
  EXPECT_NE(choose_allreduce(16, 4e7, kModel, kSegment), "parameter-server");
  EXPECT_NE(choose_allreduce(16, 4e7, kModel, kSegment), "tree");
}

TEST(AutoAllreduceTest, GivenModelPicksTheCheapestAndComputesRightResults) {
  CommOptions options;
  options.timeout = 20s;
  options.alpha_us = 5.0;
  options.beta_us_per_byte = 1e-3;
  options.allreduce_algorithm = "auto";
  spawn_ranks(
      5,
      [&](Communicator& comm) {
        for (std::int64_t count : {std::int64_t{1}, std::int64_t{100000}}) {
          std::vector<double> data(static_cast<std::size_t>(count), comm.rank() + 1.0);
          comm.allreduce(data.data(), count, DType::kF64, ReduceOp::kSum);
          EXPECT_EQ(data, std::vector<double>(static_cast<std::size_t>(count), 15.0));
        }
        // Given figures: no measurement.
        EXPECT_EQ(comm.stats().get("alpha_beta_probe").calls, 0);
      },
      options);
}

TEST(AutoAllreduceTest, MeasuresOnceAndEveryRankAgrees) {
  CommOptions options;
  options.timeout = 20s;
  std::mutex mu;
  std::vector<OpStats> probes;
  spawn_ranks(
      4,
      [&](Communicator& comm) {
        CollectiveOptions call;
        call.algorithm = "auto";
        // An async auto call and a blocking one race for the measurement; the first in sequence
        // order measures, the other waits for it.
        std::vector<float> a(1000, 1.0f);
        std::vector<float> b(3, 2.0f);
        Work work = comm.allreduce_async(a.data(), 1000, DType::kF32, ReduceOp::kSum, call);
        comm.allreduce(b.data(), 3, DType::kF32, ReduceOp::kMax, call);
        work.wait(20s);
        EXPECT_EQ(a, std::vector<float>(1000, 4.0f));
        EXPECT_EQ(b, std::vector<float>(3, 2.0f));
        std::lock_guard<std::mutex> lock(mu);
        probes.push_back(comm.stats().get("alpha_beta_probe"));
      },
      options);
  for (const OpStats& probe : probes) {
    EXPECT_EQ(probe.calls, 1);
    EXPECT_GT(probe.bytes_sent, 1 << 20);  // the large ping-pong
  }
}

TEST(AutoAllreduceTest, ProbeGivesPositiveFiguresIdenticalOnEveryRank) {
  std::mutex mu;
  std::vector<AlphaBeta> figures;
  spawn_ranks(5, [&](Communicator& comm) {
    Channel channel(comm.transport(), 12345, std::chrono::steady_clock::now() + 20s, 1 << 20);
    const AlphaBeta measured = measure_alpha_beta(channel);
    std::lock_guard<std::mutex> lock(mu);
    figures.push_back(measured);
  });
  ASSERT_EQ(figures.size(), 5u);
  for (const AlphaBeta& f : figures) {
    EXPECT_GT(f.alpha, 0.0);
    EXPECT_GT(f.beta, 0.0);
    EXPECT_EQ(f.alpha, figures[0].alpha);  // bit for bit: rank 0's broadcast
    EXPECT_EQ(f.beta, figures[0].beta);
  }
}

TEST(AutoAllreduceTest, HalfGivenModelIsAConfigError) {
  CommOptions options;
  options.alpha_us = 3.0;
  EXPECT_THROW(spawn_ranks(
                   1, [](Communicator&) {}, options),
               ConfigError);
}

}  // namespace
}  // namespace dtrain::comm
