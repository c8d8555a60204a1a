// MpiTransport::native_allreduce (MPI_Iallreduce) called directly: every dtype (f16/bf16 through
// the user-defined ops) x op x count, against the closed forms; and its deadline.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <vector>

#include "comm_test_values.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "mpi_test_env.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::kAllDTypes;

TEST(MpiNativeAllreduceTest, EveryDTypeOpAndCount) {
  auto transport = mpi_world_transport();
  const int ranks = transport->size();
  const std::set<std::int64_t> counts = {0, 1, ranks - 1, 100003};
  for (std::int64_t count : counts) {
    for (DType dtype : kAllDTypes) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
        auto data = testing::make_buffer(count, dtype);
        testing::fill_contribution(data, transport->rank(), ranks, count, dtype, op);
        ASSERT_TRUE(transport->native_allreduce(data.data(), count, dtype, op, Clock::now() + 60s));
        ASSERT_EQ(testing::first_mismatch(data.data(), ranks, count, dtype, op), -1)
            << dtype_name(dtype) << " " << reduce_op_name(op) << " count " << count;
      }
    }
  }
}

TEST(MpiNativeAllreduceTest, ARankThatNeverCallsItMakesTheOthersTimeOut) {
  auto transport = mpi_world_transport();
  const int ranks = transport->size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  if (transport->rank() == ranks - 1) return;  // never arrives
  std::vector<float> data(100, 1.0f);
  const auto start = Clock::now();
  try {
    transport->native_allreduce(data.data(), 100, DType::kF32, ReduceOp::kSum,
                                Clock::now() + 300ms);
    ADD_FAILURE() << "expected CommTimeoutError";
  } catch (const CommTimeoutError& e) {
    EXPECT_TRUE(testing::contains(e.what(), "native allreduce")) << e.what();
    EXPECT_TRUE(testing::contains(e.what(), "100 x f32")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
  // The pending collective can never be cancelled: the transport refuses further native calls.
  EXPECT_THROW(transport->native_allreduce(data.data(), 100, DType::kF32, ReduceOp::kSum,
                                           Clock::now() + 300ms),
               CommError);
}

}  // namespace
}  // namespace dtrain::comm
