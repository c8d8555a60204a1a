// Broadcast, reduce, scatter, gather, allgather, reduce-scatter, alltoall, barrier and send/recv
// over P in {1..9, 16}, against closed-form results (smaller sweeps than allreduce: one algorithm
// each).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_values.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using testing::kAllDTypes;
using testing::kAllOps;

CommOptions test_options() {
  CommOptions options;
  options.timeout = 30s;
  options.segment_bytes = 512;
  return options;
}

std::vector<std::int64_t> counts_for(int ranks) {
  const std::set<std::int64_t> counts = {0, 1, ranks - 1, 777};
  return {counts.begin(), counts.end()};
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, BroadcastFromEveryRoot) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (int root = 0; root < ranks; ++root) {
          for (std::int64_t count : counts_for(ranks)) {
            for (DType dtype : {DType::kF64, DType::kBF16, DType::kU8}) {
              auto data = testing::make_buffer(count, dtype);
              // The root holds 3i + root mod 100; the others hold junk that must be overwritten.
              for (std::int64_t i = 0; i < count; ++i) {
                testing::store(
                    dtype, data.data(), i,
                    comm.rank() == root ? static_cast<double>((3 * i + root) % 100) : 7.0);
              }
              comm.broadcast(data.data(), count, dtype, root);
              for (std::int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::load(dtype, data.data(), i),
                          static_cast<double>((3 * i + root) % 100))
                    << "P=" << ranks << " root " << root << " rank " << comm.rank() << " i " << i;
              }
            }
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, ReduceToEveryRootEveryOp) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (int root = 0; root < ranks; root += (ranks > 4 ? 3 : 1)) {
          for (std::int64_t count : counts_for(ranks)) {
            for (DType dtype : kAllDTypes) {
              for (ReduceOp op : kAllOps) {
                auto input = testing::make_buffer(count, dtype);
                testing::fill_contribution(input, comm.rank(), ranks, count, dtype, op);
                const auto original = input;
                auto output = testing::make_buffer(count, dtype);
                comm.reduce(input.data(), comm.rank() == root ? output.data() : nullptr, count,
                            dtype, op, root);
                EXPECT_EQ(input, original);
                if (comm.rank() == root) {
                  EXPECT_EQ(testing::first_mismatch(output.data(), ranks, count, dtype, op), -1)
                      << "P=" << ranks << " root " << root << " " << dtype_name(dtype) << " "
                      << reduce_op_name(op) << " count " << count;
                }
              }
            }
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, AllgatherPlacesEveryRanksBlock) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (std::int64_t count : counts_for(ranks)) {
          for (DType dtype : {DType::kF32, DType::kF16, DType::kI64}) {
            auto input = testing::make_buffer(count, dtype);
            for (std::int64_t i = 0; i < count; ++i) {
              testing::store(dtype, input.data(), i,
                             static_cast<double>((comm.rank() * 31 + i) % 1000));
            }
            auto output = testing::make_buffer(count * ranks, dtype);
            comm.allgather(input.data(), output.data(), count, dtype);
            for (int r = 0; r < ranks; ++r) {
              for (std::int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::load(dtype, output.data(), r * count + i),
                          static_cast<double>((r * 31 + i) % 1000))
                    << "P=" << ranks << " block " << r << " i " << i;
              }
            }
            // In place: the input already sits at block `rank` of the output.
            auto in_place = testing::make_buffer(count * ranks, dtype);
            for (std::int64_t i = 0; i < count; ++i) {
              testing::store(dtype, in_place.data(), comm.rank() * count + i,
                             static_cast<double>((comm.rank() * 31 + i) % 1000));
            }
            comm.allgather(
                in_place.data() + static_cast<std::size_t>(comm.rank() * count) * dtype_size(dtype),
                in_place.data(), count, dtype);
            EXPECT_EQ(in_place, output);
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, ReduceScatterEveryOp) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (std::int64_t count : counts_for(ranks)) {
          for (DType dtype : kAllDTypes) {
            for (ReduceOp op : kAllOps) {
              // Element j of the full (P x count) input is contribution(rank, j); rank r gets block
              // r.
              auto input = testing::make_buffer(count * ranks, dtype);
              testing::fill_contribution(input, comm.rank(), ranks, count * ranks, dtype, op);
              auto output = testing::make_buffer(count, dtype);
              comm.reduce_scatter(input.data(), output.data(), count, dtype, op);
              for (std::int64_t i = 0; i < count; ++i) {
                const std::int64_t j = comm.rank() * count + i;
                ASSERT_EQ(testing::load(dtype, output.data(), i),
                          testing::expected(ranks, j, dtype, op))
                    << "P=" << ranks << " " << dtype_name(dtype) << " " << reduce_op_name(op)
                    << " i " << i;
              }
            }
          }
        }
      },
      test_options());
}

// The in-place block forms a sharded optimizer uses: block r of the buffer (blocks.h, uneven when
// P does not divide the count) ends up reduced at rank r, then allgather_blocks hands every block
// back to everyone.
TEST_P(CollectivesTest, ReduceScatterBlocksThenAllgatherBlocksInPlace) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (std::int64_t count : counts_for(ranks)) {
          for (DType dtype : {DType::kF32, DType::kF64, DType::kBF16, DType::kI64}) {
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
              auto data = testing::make_buffer(count, dtype);
              testing::fill_contribution(data, comm.rank(), ranks, count, dtype, op);
              comm.reduce_scatter_blocks(data.data(), count, dtype, op);
              const std::int64_t begin = count * comm.rank() / ranks;
              const std::int64_t end = count * (comm.rank() + 1) / ranks;
              for (std::int64_t i = begin; i < end; ++i) {
                ASSERT_EQ(testing::load(dtype, data.data(), i),
                          testing::expected(ranks, i, dtype, op))
                    << "P=" << ranks << " " << dtype_name(dtype) << " " << reduce_op_name(op)
                    << " i " << i;
              }
              comm.allgather_blocks(data.data(), count, dtype);
              for (std::int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::load(dtype, data.data(), i),
                          testing::expected(ranks, i, dtype, op))
                    << "after allgather_blocks: P=" << ranks << " " << dtype_name(dtype) << " "
                    << reduce_op_name(op) << " i " << i;
              }
            }
          }
        }
        // The asynchronous forms, and a block layout that leaves ranks empty (count < P).
        std::vector<float> small(1, static_cast<float>(comm.rank() + 1));
        comm.reduce_scatter_blocks_async(small.data(), 1, DType::kF32, ReduceOp::kSum).wait(30s);
        comm.allgather_blocks_async(small.data(), 1, DType::kF32).wait(30s);
        EXPECT_EQ(small[0], static_cast<float>(ranks * (ranks + 1) / 2));
      },
      test_options());
}

// Element i of block b sent by rank r in scatter / gather / alltoall: distinct per (r, b, i) and
// exact in every dtype (integers below 256 fit f16, bf16 and u8).
double block_value(int rank, int block, std::int64_t i) {
  return static_cast<double>((rank * 37 + block * 11 + i * 3) % 250);
}

TEST_P(CollectivesTest, ScatterFromEveryRootInAndOutOfPlace) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (int root = 0; root < ranks; root += (ranks > 5 ? 2 : 1)) {
          for (std::int64_t count : counts_for(ranks)) {
            for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64, DType::kU8}) {
              const bool is_root = comm.rank() == root;
              std::vector<unsigned char> input;
              if (is_root) {
                input = testing::make_buffer(count * ranks, dtype);
                for (int b = 0; b < ranks; ++b) {
                  for (std::int64_t i = 0; i < count; ++i) {
                    testing::store(dtype, input.data(), b * count + i, block_value(root, b, i));
                  }
                }
              }
              const auto original = input;
              auto output = testing::make_buffer(count, dtype);
              comm.scatter(is_root ? input.data() : nullptr, output.data(), count, dtype, root);
              for (std::int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::load(dtype, output.data(), i), block_value(root, comm.rank(), i))
                    << "P=" << ranks << " root " << root << " rank " << comm.rank() << " i " << i;
              }
              EXPECT_EQ(input, original);  // the root's input is read only
              // In place at the root: its block stays where it is in the input.
              const std::size_t own = static_cast<std::size_t>(root * count) * dtype_size(dtype);
              comm.scatter(is_root ? input.data() : nullptr,
                           is_root ? input.data() + own : output.data(), count, dtype, root);
              if (is_root) {
                EXPECT_EQ(input, original);
              }
              for (std::int64_t i = 0; i < count && !is_root; ++i) {
                ASSERT_EQ(testing::load(dtype, output.data(), i),
                          block_value(root, comm.rank(), i));
              }
            }
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, GatherToEveryRootInAndOutOfPlace) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (int root = 0; root < ranks; root += (ranks > 5 ? 2 : 1)) {
          for (std::int64_t count : counts_for(ranks)) {
            for (DType dtype : {DType::kF64, DType::kF16, DType::kI32, DType::kU8}) {
              const bool is_root = comm.rank() == root;
              auto input = testing::make_buffer(count, dtype);
              for (std::int64_t i = 0; i < count; ++i) {
                testing::store(dtype, input.data(), i, block_value(comm.rank(), root, i));
              }
              std::vector<unsigned char> output;
              if (is_root) output = testing::make_buffer(count * ranks, dtype);
              comm.gather(input.data(), is_root ? output.data() : nullptr, count, dtype, root);
              auto check = [&](const std::vector<unsigned char>& gathered) {
                for (int r = 0; r < ranks; ++r) {
                  for (std::int64_t i = 0; i < count; ++i) {
                    ASSERT_EQ(testing::load(dtype, gathered.data(), r * count + i),
                              block_value(r, root, i))
                        << "P=" << ranks << " root " << root << " block " << r << " i " << i;
                  }
                }
              };
              if (is_root) check(output);
              // In place at the root: its contribution already sits in its block of the output.
              std::vector<unsigned char> in_place;
              if (is_root) {
                in_place = testing::make_buffer(count * ranks, dtype);
                for (std::int64_t i = 0; i < count; ++i) {
                  testing::store(dtype, in_place.data(), root * count + i,
                                 block_value(root, root, i));
                }
              }
              const std::size_t own = static_cast<std::size_t>(root * count) * dtype_size(dtype);
              comm.gather(is_root ? in_place.data() + own : input.data(),
                          is_root ? in_place.data() : nullptr, count, dtype, root);
              if (is_root) check(in_place);
            }
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, AlltoallInAndOutOfPlace) {
  const int ranks = GetParam();
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (std::int64_t count : counts_for(ranks)) {
          for (DType dtype : kAllDTypes) {
            // Block j of rank r's input is block_value(r, j, .); it must land in block r of j.
            auto input = testing::make_buffer(count * ranks, dtype);
            for (int b = 0; b < ranks; ++b) {
              for (std::int64_t i = 0; i < count; ++i) {
                testing::store(dtype, input.data(), b * count + i, block_value(comm.rank(), b, i));
              }
            }
            const auto original = input;
            auto output = testing::make_buffer(count * ranks, dtype);
            comm.alltoall(input.data(), output.data(), count, dtype);
            for (int r = 0; r < ranks; ++r) {
              for (std::int64_t i = 0; i < count; ++i) {
                ASSERT_EQ(testing::load(dtype, output.data(), r * count + i),
                          block_value(r, comm.rank(), i))
                    << "P=" << ranks << " " << dtype_name(dtype) << " block " << r << " i " << i;
              }
            }
            EXPECT_EQ(input, original);
            comm.alltoall(input.data(), input.data(), count, dtype);
            EXPECT_EQ(input, output) << "in place, P=" << ranks;
          }
        }
      },
      test_options());
}

TEST_P(CollectivesTest, BarrierHoldsEveryoneUntilTheLastArrives) {
  const int ranks = GetParam();
  std::atomic<int> arrived{0};
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        for (int round = 1; round <= 3; ++round) {
          if (comm.rank() == round % ranks) std::this_thread::sleep_for(10ms);
          arrived.fetch_add(1);
          comm.barrier();
          // Nobody leaves round k before all P ranks have arrived at it.
          EXPECT_GE(arrived.load(), round * ranks);
          comm.barrier();
        }
      },
      test_options());
}

TEST_P(CollectivesTest, SendRecvAroundTheRingWithTags) {
  const int ranks = GetParam();
  if (ranks == 1) GTEST_SKIP() << "needs a peer";
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        const int next = (comm.rank() + 1) % ranks;
        const int prev = (comm.rank() + ranks - 1) % ranks;
        // Two small messages (buffered, so the sends return at once) sent in one tag order and
        // received in the other, then a large one (the receiver copies from the sender's buffer).
        const std::int64_t first = 100 + comm.rank();
        const std::int32_t second = 200 + comm.rank();
        std::vector<std::int32_t> big(5000, comm.rank());
        auto send_all = [&] {
          comm.send(&first, 1, DType::kI64, next, 7);
          comm.send(&second, 1, DType::kI32, next, 3);
          comm.send(big.data(), 5000, DType::kI32, next, 7);
        };
        if (comm.rank() % 2 == 0) send_all();
        std::int64_t got_first = 0;
        std::int32_t got_second = 0;
        std::vector<std::int32_t> got_big(5000, -1);
        comm.recv(&got_second, 1, DType::kI32, prev, 3);
        comm.recv(&got_first, 1, DType::kI64, prev, 7);  // FIFO within tag 7: first, then big
        comm.recv(got_big.data(), 5000, DType::kI32, prev, 7);
        if (comm.rank() % 2 == 1) send_all();
        EXPECT_EQ(got_first, 100 + prev);
        EXPECT_EQ(got_second, 200 + prev);
        EXPECT_EQ(got_big, std::vector<std::int32_t>(5000, prev));
        EXPECT_EQ(comm.stats().get("send").calls, 3);
        EXPECT_EQ(comm.stats().get("recv").bytes_received, 8 + 4 + 20000);
      },
      test_options());
}

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Values(1, 2, 3, 4, 5, 6, 7, 8, 9, 16),
                         [](const ::testing::TestParamInfo<int>& param_info) {
                           return fmt::format("P{}", param_info.param);
                         });

TEST(CollectivesArgumentsTest, BadArgumentsThrowAtTheCall) {
  spawn_ranks(2, [](Communicator& comm) {
    float x = 0;
    EXPECT_THROW(comm.broadcast(&x, 1, DType::kF32, 2), ConfigError);
    EXPECT_THROW(comm.allreduce(&x, -1, DType::kF32, ReduceOp::kSum), ShapeError);
    EXPECT_THROW(comm.send(&x, 1, DType::kF32, 5), ConfigError);
    CollectiveOptions options;
    options.algorithm = "ring";
    EXPECT_THROW(comm.broadcast(&x, 1, DType::kF32, 0, options), ConfigError);
    options.algorithm = "binomial";
    comm.broadcast(&x, 1, DType::kF32, 0, options);  // its own name is accepted
    comm.scatter(comm.rank() == 0 ? &x : nullptr, &x, 0, DType::kF32, 0, options);
    options.algorithm = "pairwise";
    comm.alltoall(&x, &x, 0, DType::kF32, options);
    // Scatter needs its input at the root only, gather its output at the root only.
    std::vector<float> two(2, 0.0f);
    EXPECT_THROW(comm.scatter(nullptr, &x, 1, DType::kF32, comm.rank()), ConfigError);
    EXPECT_THROW(comm.gather(&x, nullptr, 1, DType::kF32, comm.rank()), ConfigError);
    EXPECT_THROW(comm.gather(&x, two.data(), 1, DType::kF32, 3), ConfigError);
    EXPECT_THROW(comm.alltoall(nullptr, two.data(), 1, DType::kF32), ConfigError);
  });
}

}  // namespace
}  // namespace dtrain::comm
