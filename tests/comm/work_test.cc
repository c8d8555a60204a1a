// Async collectives: Works complete in submission order, rethrow their errors, and never mix
// with blocking collectives running at the same time.
#include "dtrain/comm/work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

TEST(WorkTest, WaitTimesOutThenSucceedsOrRethrows) {
  Work work("allreduce #3");
  EXPECT_FALSE(work.done());
  try {
    work.wait(10ms);
    FAIL() << "expected timeout";
  } catch (const CommTimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #3"), std::string::npos);
  }
  const Work copy = work;  // copies share the state
  copy.finish(nullptr);
  EXPECT_TRUE(work.done());
  EXPECT_EQ(work.error(), nullptr);
  work.wait(0ms);

  Work failed("broadcast #1");
  failed.finish(std::make_exception_ptr(CommError("peer gone")));
  EXPECT_TRUE(failed.done());
  EXPECT_NE(failed.error(), nullptr);
  EXPECT_THROW(failed.wait(1s), CommError);
}

TEST(WorkTest, AsyncCollectivesCompleteInSubmissionOrderWithCorrectResults) {
  constexpr int kRanks = 4;
  constexpr int kCalls = 6;
  CommOptions options;
  options.timeout = 20s;
  spawn_ranks(
      kRanks,
      [&](Communicator& comm) {
        std::vector<std::vector<float>> buffers;
        for (int k = 0; k < kCalls; ++k) {
          buffers.emplace_back(static_cast<std::size_t>(5000 + k),
                               static_cast<float>(comm.rank() + k));
        }
        std::vector<Work> works;
        for (int k = 0; k < kCalls; ++k) {
          CollectiveOptions call;
          call.algorithm = k % 2 == 0 ? "ring" : "halving-doubling";
          works.push_back(comm.allreduce_async(buffers[static_cast<std::size_t>(k)].data(),
                                               5000 + k, DType::kF32, ReduceOp::kSum, call));
        }
        // A blocking collective meanwhile: its own sequence number keeps its messages apart.
        std::vector<double> sync(3000, 1.0);
        comm.allreduce(sync.data(), 3000, DType::kF64, ReduceOp::kSum);
        EXPECT_EQ(sync, std::vector<double>(3000, kRanks));
        works.back().wait(20s);
        for (const Work& w : works) EXPECT_TRUE(w.done()) << "FIFO: the last done means all done";
        for (int k = 0; k < kCalls; ++k) {
          // sum over ranks of (rank + k) = 0 + 1 + 2 + 3 + 4k
          const float want = static_cast<float>(6 + kRanks * k);
          EXPECT_EQ(buffers[static_cast<std::size_t>(k)],
                    std::vector<float>(static_cast<std::size_t>(5000 + k), want));
        }
      },
      options);
}

TEST(WorkTest, EveryAsyncCollectiveKind) {
  spawn_ranks(3, [](Communicator& comm) {
    std::vector<std::int32_t> bcast(10, comm.rank() == 1 ? 9 : 0);
    std::vector<std::int32_t> gather_in(2, comm.rank());
    std::vector<std::int32_t> gather_out(6, -1);
    std::vector<std::int32_t> rs_in(6, 1);
    std::vector<std::int32_t> rs_out(2, 0);
    std::vector<std::int32_t> red_in(4, comm.rank() + 1);
    std::vector<std::int32_t> red_out(4, 0);
    std::vector<std::int32_t> ar_in(4, 2);
    std::vector<std::int32_t> ar_out(4, 0);
    std::vector<std::int32_t> scatter_in(6, 0);
    for (int i = 0; i < 6; ++i) scatter_in[static_cast<std::size_t>(i)] = 10 + i;
    std::vector<std::int32_t> scatter_out(2, -1);
    std::vector<std::int32_t> gather_root_out(6, -1);
    std::vector<std::int32_t> a2a_in = {comm.rank(), comm.rank(), comm.rank()};
    std::vector<std::int32_t> a2a_out(3, -1);
    std::vector<Work> works = {
        comm.barrier_async(),
        comm.broadcast_async(bcast.data(), 10, DType::kI32, 1),
        comm.allgather_async(gather_in.data(), gather_out.data(), 2, DType::kI32),
        comm.reduce_scatter_async(rs_in.data(), rs_out.data(), 2, DType::kI32, ReduceOp::kSum),
        comm.reduce_async(red_in.data(), red_out.data(), 4, DType::kI32, ReduceOp::kProd, 2),
        comm.allreduce_async(ar_in.data(), ar_out.data(), 4, DType::kI32, ReduceOp::kAvg),
        comm.scatter_async(comm.rank() == 0 ? scatter_in.data() : nullptr, scatter_out.data(), 2,
                           DType::kI32, 0),
        comm.gather_async(gather_in.data(), comm.rank() == 1 ? gather_root_out.data() : nullptr, 2,
                          DType::kI32, 1),
        comm.alltoall_async(a2a_in.data(), a2a_out.data(), 1, DType::kI32),
    };
    for (const Work& w : works) w.wait(20s);
    EXPECT_EQ(bcast, std::vector<std::int32_t>(10, 9));
    EXPECT_EQ(gather_out, (std::vector<std::int32_t>{0, 0, 1, 1, 2, 2}));
    EXPECT_EQ(rs_out, std::vector<std::int32_t>(2, 3));
    if (comm.rank() == 2) {
      EXPECT_EQ(red_out, std::vector<std::int32_t>(4, 6));  // 1 x 2 x 3
    }
    EXPECT_EQ(ar_out, std::vector<std::int32_t>(4, 2));
    const std::int32_t first = 10 + 2 * comm.rank();
    EXPECT_EQ(scatter_out, (std::vector<std::int32_t>{first, first + 1}));
    if (comm.rank() == 1) {
      EXPECT_EQ(gather_root_out, (std::vector<std::int32_t>{0, 0, 1, 1, 2, 2}));
    }
    EXPECT_EQ(a2a_out, (std::vector<std::int32_t>{0, 1, 2}));
  });
}

TEST(WorkTest, AsyncErrorIsRethrownByWaitAndLaterWorkStillRuns) {
  CommOptions options;
  options.timeout = 10s;
  spawn_ranks(
      2,
      [](Communicator& comm) {
        std::vector<float> data(100, 1.0f);
        Work bad = comm.allreduce_async(data.data(), comm.rank() == 0 ? 100 : 99, DType::kF32,
                                        ReduceOp::kSum);
        Work good = comm.allreduce_async(data.data(), 100, DType::kF32, ReduceOp::kSum);
        try {
          bad.wait(10s);
          ADD_FAILURE() << "expected CommError";
        } catch (const CommError& e) {
          EXPECT_NE(std::string(e.what()).find("count 99"), std::string::npos) << e.what();
        }
        EXPECT_NE(bad.error(), nullptr);
        good.wait(10s);
        EXPECT_EQ(data, std::vector<float>(100, 2.0f));
      },
      options);
}

}  // namespace
}  // namespace dtrain::comm
