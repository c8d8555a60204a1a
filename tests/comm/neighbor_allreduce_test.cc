// Neighbour allreduce: against the closed form W x for every topology, P = 1..9, several steps,
// counts and both dtypes; bytes per rank = out-degree x count x element size (one-peer
// exponential: one vector per step); the fully connected topology equals allreduce average; many
// calls in flight without header checks do not mix; bad arguments and a failed rank are named.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "comm_test_values.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/topology.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool exists(TopologyKind kind, int ranks) {
  try {
    Topology(kind, ranks);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// Rank r's element i, in [-1, 1]: exact in f32, distinct per rank.
double value(int rank, std::int64_t i, std::int64_t step) {
  return static_cast<double>((rank * 7 + i * 3 + step * 5) % 11 - 5) / 8.0 + rank / 64.0;
}

// sum_j W_rj x_j[i] in double.
double closed_form(const std::vector<double>& w, int p, int rank, std::int64_t i,
                   std::int64_t step) {
  double sum = 0.0;
  for (int j = 0; j < p; ++j) sum += w[rank * p + j] * value(j, i, step);
  return sum;
}

template <typename T>
std::vector<T> inputs(int rank, std::int64_t count, std::int64_t step) {
  std::vector<T> x(static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) x[i] = static_cast<T>(value(rank, i, step));
  return x;
}

template <typename T>
void check_closed_form(Communicator& comm, const Topology& topology, std::int64_t count,
                       std::int64_t step, bool in_place, double tolerance,
                       const std::string& where) {
  const int p = comm.size();
  const int r = comm.rank();
  const std::vector<double> w = topology.mixing_matrix(step);
  std::vector<T> x = inputs<T>(r, count, step);
  const std::vector<T> original = x;
  std::vector<T> out(static_cast<std::size_t>(count), T{-7});
  const DType dtype = sizeof(T) == 4 ? DType::kF32 : DType::kF64;
  const OpStats before = comm.stats().get("neighbor_allreduce");
  if (in_place) {
    comm.neighbor_allreduce(x.data(), x.data(), count, dtype, topology, step);
    out = x;
  } else {
    comm.neighbor_allreduce(x.data(), out.data(), count, dtype, topology, step);
    EXPECT_EQ(x, original) << where << ": the input of an out-of-place call is not written";
  }
  for (std::int64_t i = 0; i < count; ++i) {
    const double want = closed_form(w, p, r, i, step);
    if (std::abs(out[i] - want) > tolerance) {
      ADD_FAILURE() << where << " rank " << r << " element " << i << ": " << out[i] << " expected "
                    << want;
      break;
    }
  }
  // Exactly one message of count elements to each out-neighbour, one from each in-neighbour.
  const OpStats after = comm.stats().get("neighbor_allreduce");
  const auto out_degree = static_cast<std::int64_t>(topology.out_neighbors(r, step).size());
  const auto in_degree = static_cast<std::int64_t>(topology.in_neighbors(r, step).size()) - 1;
  const auto bytes = count * static_cast<std::int64_t>(sizeof(T));
  EXPECT_EQ(after.calls - before.calls, 1) << where;
  EXPECT_EQ(after.bytes_sent - before.bytes_sent, out_degree * bytes) << where << " rank " << r;
  EXPECT_EQ(after.bytes_received - before.bytes_received, in_degree * bytes)
      << where << " rank " << r;
  EXPECT_EQ(after.messages_sent - before.messages_sent, count > 0 ? out_degree : 0) << where;
  EXPECT_EQ(after.messages_received - before.messages_received, count > 0 ? in_degree : 0) << where;
}

class NeighborAllreduceSweepTest : public ::testing::TestWithParam<int> {};

TEST_P(NeighborAllreduceSweepTest, EveryTopologyMatchesTheClosedFormAndCountsItsBytes) {
  const int p = GetParam();
  const bool quick = testing::quick_tests();
  // 0, 1, fewer than a combine block, more than two blocks and not a multiple of one.
  const std::vector<std::int64_t> counts =
      quick ? std::vector<std::int64_t>{0, 1, 2500} : std::vector<std::int64_t>{0, 1, 1000, 2500};
  CommOptions options;
  options.timeout = 30s;
  for (const TopologyKind kind : topology_kinds()) {
    if (!exists(kind, p)) continue;
    const Topology topology(kind, p);
    spawn_ranks(
        p,
        [&](Communicator& comm) {
          for (std::int64_t step = 0; step <= topology.period(); ++step) {
            for (const std::int64_t count : counts) {
              const std::string where = std::string(topology.name()) + " P=" + std::to_string(p) +
                                        " step " + std::to_string(step) + " count " +
                                        std::to_string(count);
              check_closed_form<float>(comm, topology, count, step, step % 2 == 0, 1e-6,
                                       where + " f32");
              check_closed_form<double>(comm, topology, count, step, step % 2 == 1, 1e-14,
                                        where + " f64");
            }
          }
        },
        options);
  }
}

INSTANTIATE_TEST_SUITE_P(Ranks, NeighborAllreduceSweepTest, ::testing::Range(1, 10));

TEST(NeighborAllreduceTest, OnePeerExponentialSendsOneVectorPerStep) {
  constexpr int kRanks = 8;
  constexpr std::int64_t kCount = 10007;
  const Topology topology(TopologyKind::kOnePeerExponential, kRanks);
  spawn_ranks(kRanks, [&](Communicator& comm) {
    std::vector<float> x = inputs<float>(comm.rank(), kCount, 0);
    for (std::int64_t step = 0; step < 6; ++step) {
      comm.neighbor_allreduce(x.data(), x.data(), kCount, DType::kF32, topology, step);
    }
    const OpStats s = comm.stats().get("neighbor_allreduce");
    EXPECT_EQ(s.calls, 6);
    EXPECT_EQ(s.bytes_sent, 6 * kCount * 4);
    EXPECT_EQ(s.messages_sent, 6);
    EXPECT_EQ(s.bytes_received, 6 * kCount * 4);
    // Two periods of a power-of-two P: every replica holds the average of the inputs.
    for (std::int64_t i = 0; i < kCount; i += 97) {
      double average = 0.0;
      for (int j = 0; j < kRanks; ++j) average += value(j, i, 0) / kRanks;
      ASSERT_NEAR(x[i], average, 1e-6) << "rank " << comm.rank() << " element " << i;
    }
  });
}

TEST(NeighborAllreduceTest, FullTopologyEqualsAllreduceAverage) {
  for (int p = 1; p <= 9; ++p) {
    const Topology topology(TopologyKind::kFull, p);
    spawn_ranks(p, [&](Communicator& comm) {
      constexpr std::int64_t kCount = 3001;
      std::vector<float> mixed = inputs<float>(comm.rank(), kCount, 3);
      std::vector<float> averaged = mixed;
      comm.neighbor_allreduce(mixed.data(), mixed.data(), kCount, DType::kF32, topology, 3);
      comm.allreduce(averaged.data(), kCount, DType::kF32, ReduceOp::kAvg);
      for (std::int64_t i = 0; i < kCount; ++i) {
        ASSERT_NEAR(mixed[i], averaged[i], 1e-6) << "P=" << p << " element " << i;
      }
      EXPECT_EQ(comm.stats().get("neighbor_allreduce").bytes_sent, (p - 1) * kCount * 4);
    });
  }
}

TEST(NeighborAllreduceTest, AsyncCallsInFlightWithoutHeaderChecksDoNotMix) {
  // Every rank queues 12 steps of one-peer exponential at once, without the header check's
  // synchronization: only the sequence numbers in the tags keep the steps apart.
  constexpr int kRanks = 6;
  constexpr std::int64_t kCount = 777;
  constexpr int kSteps = 12;
  const Topology topology(TopologyKind::kOnePeerExponential, kRanks);
  CommOptions options;
  options.check_headers = false;
  spawn_ranks(
      kRanks,
      [&](Communicator& comm) {
        std::vector<std::vector<double>> x;
        std::vector<std::vector<double>> out(kSteps, std::vector<double>(kCount));
        for (int step = 0; step < kSteps; ++step)
          x.push_back(inputs<double>(comm.rank(), kCount, step));
        std::vector<Work> works;
        for (int step = 0; step < kSteps; ++step) {
          works.push_back(comm.neighbor_allreduce_async(x[step].data(), out[step].data(), kCount,
                                                        DType::kF64, topology, step));
        }
        for (int step = 0; step < kSteps; ++step) {
          works[step].wait(30s);
          const std::vector<double> w = topology.mixing_matrix(step);
          for (std::int64_t i = 0; i < kCount; ++i) {
            ASSERT_NEAR(out[step][i], closed_form(w, kRanks, comm.rank(), i, step), 1e-14)
                << "step " << step << " element " << i;
          }
        }
      },
      options);
}

TEST(NeighborAllreduceTest, BadArgumentsAreConfigErrors) {
  spawn_ranks(4, [&](Communicator& comm) {
    std::vector<float> x(10, 1.0f);
    std::vector<std::int32_t> ints(10, 1);
    const Topology ring(TopologyKind::kRing, 4);
    try {
      comm.neighbor_allreduce(x.data(), x.data(), 10, DType::kF32, Topology(TopologyKind::kRing, 5),
                              0);
      ADD_FAILURE() << "no error for a topology of another size";
    } catch (const ConfigError& e) {
      EXPECT_TRUE(contains(e.what(), "topology 'ring' is for 5 ranks, the communicator has 4"))
          << e.what();
    }
    EXPECT_THROW(comm.neighbor_allreduce(ints.data(), ints.data(), 10, DType::kI32, ring, 0),
                 ConfigError);
    EXPECT_THROW(comm.neighbor_allreduce(x.data(), x.data(), 10, DType::kF32, ring, -1),
                 ConfigError);
    CollectiveOptions named;
    named.algorithm = "ring";
    EXPECT_THROW(comm.neighbor_allreduce(x.data(), x.data(), 10, DType::kF32, ring, 0, named),
                 ConfigError);
    // None of them took a sequence number: the next call still matches across ranks.
    comm.neighbor_allreduce(x.data(), x.data(), 10, DType::kF32, ring, 0);
    EXPECT_EQ(x, std::vector<float>(10, 1.0f));
  });
}

TEST(NeighborAllreduceTest, RanksAtDifferentStepsAreNamedByTheHeaderCheck) {
  constexpr int kRanks = 4;
  const Topology topology(TopologyKind::kOnePeerExponential, kRanks);
  std::vector<std::string> errors(kRanks);
  spawn_ranks(kRanks, [&](Communicator& comm) {
    std::vector<float> x(100, 1.0f);
    const std::int64_t step = comm.rank() == 2 ? 1 : 0;
    try {
      comm.neighbor_allreduce(x.data(), x.data(), 100, DType::kF32, topology, step);
    } catch (const CommError& e) {
      errors[comm.rank()] = e.what();
    }
  });
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_TRUE(contains(errors[r], "neighbor_allreduce #0")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "one-peer-exponential step 1")) << errors[r];
    EXPECT_TRUE(contains(errors[r], "rank 2")) << errors[r];
  }
}

TEST(NeighborAllreduceTest, ARankThatFailsStopsItsNeighboursNamingIt) {
  constexpr int kRanks = 5;
  constexpr int kFailing = 2;
  const Topology ring(TopologyKind::kRing, kRanks);
  CommOptions options;
  options.timeout = 20s;  // the neighbours must fail at once, long before this
  options.check_headers = false;
  std::vector<std::string> errors(kRanks);
  std::vector<double> seconds(kRanks, 0.0);
  EXPECT_THROW(
      spawn_ranks(
          kRanks,
          [&](Communicator& comm) {
            if (comm.rank() == kFailing) throw Error("injected failure");
            std::vector<float> x(5000, 1.0f);
            const auto start = std::chrono::steady_clock::now();
            try {
              comm.neighbor_allreduce(x.data(), x.data(), 5000, DType::kF32, ring, 0);
            } catch (const CommError& e) {
              errors[comm.rank()] = e.what();
            }
            seconds[comm.rank()] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          },
          options),
      Error);
  for (const int neighbour : {1, 3}) {
    EXPECT_TRUE(contains(errors[neighbour], "neighbor_allreduce #0")) << errors[neighbour];
    EXPECT_TRUE(contains(errors[neighbour], "rank 2 aborted")) << errors[neighbour];
    EXPECT_TRUE(contains(errors[neighbour], "injected failure")) << errors[neighbour];
    EXPECT_LT(seconds[neighbour], 10.0);
  }
}

}  // namespace
}  // namespace dtrain::comm
