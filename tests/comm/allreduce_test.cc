// Allreduce: every algorithm x P in {1..9, 16} x counts {0, 1, P-1, 1000, 100003} x dtypes x ops
// against the closed-form results of comm_test_values.h ("native" only where the transport has
// one: on inproc it must fail with a ConfigError naming the alternatives).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <set>
#include <string>
#include <vector>

#include "comm_test_values.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using testing::contribution;
using testing::first_mismatch;
using testing::kAllDTypes;
using testing::kAllOps;

constexpr std::int64_t kLargeCount = 100003;

class AllreduceSweepTest : public ::testing::TestWithParam<int> {};

TEST_P(AllreduceSweepTest, EveryAlgorithmCountDTypeAndOp) {
  const int ranks = GetParam();
  const bool quick = testing::quick_tests();
  std::set<std::int64_t> count_set = {0, 1, ranks - 1, 1000};
  if (!quick || ranks <= 4) count_set.insert(kLargeCount);
  const std::vector<std::int64_t> counts(count_set.begin(), count_set.end());
  CommOptions options;
  options.timeout = 30s;
  options.segment_bytes = 1000;  // many segments per ring step, partial last segments
  options.local_size = 3;        // hierarchical: groups of 3, the last one smaller unless 3 | P
  std::atomic<int> calls{0};
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        const int rank = comm.rank();
        for (const auto& algorithm : allreduce_algorithms()) {
          if (algorithm.name == kNativeAllreduce) continue;  // inproc has none: NativeTest
          CollectiveOptions call_options;
          call_options.algorithm = std::string(algorithm.name);
          for (std::int64_t count : counts) {
            for (std::size_t d = 0; d < std::size(kAllDTypes); ++d) {
              const DType dtype = kAllDTypes[d];
              for (ReduceOp op : kAllOps) {
                // The large count runs every dtype with sum and every op with f32 (in quick mode
                // only f32 sum): it exercises segmentation, which does not depend on the type.
                if (count == kLargeCount) {
                  const bool f32_any_op = dtype == DType::kF32 && !quick;
                  const bool sum_any_dtype =
                      op == ReduceOp::kSum && (!quick || dtype == DType::kF32);
                  if (!f32_any_op && !sum_any_dtype) continue;
                }
                auto input = testing::make_buffer(count, dtype);
                testing::fill_contribution(input, rank, ranks, count, dtype, op);
                const bool in_place = (count + static_cast<std::int64_t>(d)) % 2 == 0;
                std::vector<unsigned char> output;
                if (in_place) {
                  comm.allreduce(input.data(), count, dtype, op, call_options);
                } else {
                  output = testing::make_buffer(count, dtype);
                  comm.allreduce(input.data(), output.data(), count, dtype, op, call_options);
                }
                const void* result = in_place ? input.data() : output.data();
                const std::int64_t bad = first_mismatch(result, ranks, count, dtype, op);
                if (bad >= 0) {
                  ADD_FAILURE() << algorithm.name << " P=" << ranks << " rank " << rank << " count "
                                << count << " " << dtype_name(dtype) << " " << reduce_op_name(op)
                                << (in_place ? " in place" : " out of place") << ": element " << bad
                                << " is " << testing::load(dtype, result, bad) << ", expected "
                                << testing::expected(ranks, bad, dtype, op);
                }
                if (!in_place) {
                  // The input of an out-of-place call is left as it was.
                  auto original = testing::make_buffer(count, dtype);
                  testing::fill_contribution(original, rank, ranks, count, dtype, op);
                  EXPECT_EQ(input, original) << algorithm.name << " P=" << ranks;
                }
                if (rank == 0) calls.fetch_add(1);
              }
            }
          }
        }
      },
      options);
  EXPECT_GT(calls.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Ranks, AllreduceSweepTest,
                         ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return fmt::format("P{}", param_info.param);
                         });

TEST(AllreduceTest, DefaultAlgorithmComesFromCommOptions) {
  for (const auto& algorithm : allreduce_algorithms()) {
    if (algorithm.name == kNativeAllreduce) continue;
    CommOptions options;
    options.timeout = 10s;
    options.allreduce_algorithm = std::string(algorithm.name);
    spawn_ranks(
        3,
        [&](Communicator& comm) {
          std::vector<float> data(10, static_cast<float>(comm.rank() + 1));
          comm.allreduce(data.data(), 10, DType::kF32, ReduceOp::kSum);
          EXPECT_EQ(data, std::vector<float>(10, 6.0f)) << algorithm.name;  // 1 + 2 + 3
        },
        options);
  }
}

TEST(AllreduceTest, HierarchicalForEveryGroupSize) {
  // Groups of G consecutive ranks; G = 0 and G >= P make one group, G = 1 makes every rank a
  // leader (plain ring among all).
  for (int ranks : {1, 2, 5, 8}) {
    for (int group : {0, 1, 2, 3, 4, 8, 9}) {
      CommOptions options;
      options.timeout = 20s;
      options.segment_bytes = 256;
      options.local_size = group;
      options.allreduce_algorithm = "hierarchical";
      spawn_ranks(
          ranks,
          [&](Communicator& comm) {
            for (std::int64_t count :
                 {std::int64_t{1}, std::int64_t{ranks + 1}, std::int64_t{999}}) {
              for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kProd}) {
                auto data = testing::make_buffer(count, DType::kI64);
                testing::fill_contribution(data, comm.rank(), ranks, count, DType::kI64, op);
                comm.allreduce(data.data(), count, DType::kI64, op);
                EXPECT_EQ(first_mismatch(data.data(), ranks, count, DType::kI64, op), -1)
                    << "P=" << ranks << " G=" << group << " count " << count;
              }
            }
          },
          options);
    }
  }
}

TEST(AllreduceTest, HierarchicalRunsBesideAsyncCallsAndOnASplit) {
  // The levels are built at the first hierarchical call, whichever thread runs it; async and
  // blocking hierarchical calls interleave; a sub-communicator has its own levels.
  CommOptions options;
  options.timeout = 20s;
  options.local_size = 2;
  spawn_ranks(
      6,
      [&](Communicator& comm) {
        CollectiveOptions hierarchical;
        hierarchical.algorithm = "hierarchical";
        std::vector<float> a(100, 1.0f);
        std::vector<float> b(50, 2.0f);
        Work work = comm.allreduce_async(a.data(), 100, DType::kF32, ReduceOp::kSum, hierarchical);
        comm.allreduce(b.data(), 50, DType::kF32, ReduceOp::kSum, hierarchical);
        work.wait(20s);
        EXPECT_EQ(a, std::vector<float>(100, 6.0f));
        EXPECT_EQ(b, std::vector<float>(50, 12.0f));
        auto half = comm.split(comm.rank() % 2, comm.rank());
        std::vector<float> c(7, static_cast<float>(comm.rank()));
        half->allreduce(c.data(), 7, DType::kF32, ReduceOp::kSum, hierarchical);
        // Evens 0 + 2 + 4, odds 1 + 3 + 5.
        EXPECT_EQ(c, std::vector<float>(7, comm.rank() % 2 == 0 ? 6.0f : 9.0f));
      },
      options);
}

TEST(AllreduceTest, NativeOnInprocIsAConfigErrorNamingTheAlternatives) {
  try {
    spawn_ranks(2, [](Communicator& comm) {
      float x = 1.0f;
      CollectiveOptions options;
      options.algorithm = "native";
      comm.allreduce(&x, 1, DType::kF32, ReduceOp::kSum, options);
    });
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("allreduce algorithm 'native' needs a transport with its own allreduce "
                        "(mpi); transport 'inproc' has none: choose one of ring,"),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("native,"), std::string::npos) << what;
  }
}

TEST(AllreduceTest, UnknownAlgorithmIsConfigErrorNamingAcceptedOnes) {
  try {
    spawn_ranks(2, [](Communicator& comm) {
      float x = 1.0f;
      CollectiveOptions options;
      options.algorithm = "butterfly";
      comm.allreduce(&x, 1, DType::kF32, ReduceOp::kSum, options);
    });
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'butterfly'"), std::string::npos) << what;
    EXPECT_NE(what.find("ring, parameter-server, sharded-ps, tree, halving-doubling, "
                        "double-binary-tree, hierarchical, native, auto"),
              std::string::npos)
        << what;
  }
  CommOptions bad;
  bad.allreduce_algorithm = "nccl";
  EXPECT_THROW(spawn_ranks(
                   1, [](Communicator&) {}, bad),
               ConfigError);
}

}  // namespace
}  // namespace dtrain::comm
