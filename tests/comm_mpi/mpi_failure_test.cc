// Nothing hangs and mistakes are named, with real processes: a rank that never arrives, ranks
// that disagree about a collective's arguments, a message larger than its receive buffer. (A rank
// that dies is kill_peer_test.sh: mpirun ends the whole job.)
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "mpi_test_env.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::contains;

CommOptions short_timeout(bool check_headers) {
  CommOptions options = testing::mpi_test_options();
  options.timeout = 1000ms;
  options.check_headers = check_headers;
  return options;
}

TEST(MpiNeverArrivesTest, OthersFailWithinTheTimeoutNamingTheMissingRank) {
  auto comm = testing::make_communicator(short_timeout(true));
  const int ranks = comm->size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  const int missing = ranks - 1;
  if (comm->rank() == missing) {
    // Stay alive (and away) until the others have given up.
    std::this_thread::sleep_for(1500ms);
    return;
  }
  std::vector<float> data(1000, 1.0f);
  const auto start = Clock::now();
  try {
    comm->allreduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "expected CommTimeoutError";
  } catch (const CommTimeoutError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "missing rank(s): " + std::to_string(missing))) << what;
    EXPECT_TRUE(contains(what, "allreduce #0")) << what;
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_LT(seconds, 5.0);
}

TEST(MpiNeverArrivesTest, WithoutTheHeaderCheckTheOthersStillTimeOut) {
  auto comm = testing::make_communicator(short_timeout(false));
  const int ranks = comm->size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  if (comm->rank() == ranks - 1) {
    std::this_thread::sleep_for(1500ms);
    return;
  }
  std::vector<float> data(50000, 1.0f);
  const auto start = Clock::now();
  try {
    comm->allreduce(data.data(), 50000, DType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "expected CommTimeoutError";
  } catch (const CommTimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "before its deadline")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
}

TEST(MpiMismatchTest, DifferentCountsAreNamedWithBothRanks) {
  auto comm = testing::make_communicator();
  const int ranks = comm->size();
  if (ranks < 2) GTEST_SKIP() << "needs 2 ranks";
  const std::int64_t count = comm->rank() == 1 ? 10 : 11;
  std::vector<float> data(11, 1.0f);
  try {
    comm->allreduce(data.data(), count, DType::kF32, ReduceOp::kSum);
    ADD_FAILURE() << "expected CommError";
  } catch (const CommTimeoutError& e) {
    ADD_FAILURE() << "timeout instead of a mismatch: " << e.what();
  } catch (const CommError& e) {
    const std::string what = e.what();
    EXPECT_TRUE(contains(what, "count 10")) << what;
    EXPECT_TRUE(contains(what, "count 11")) << what;
    EXPECT_TRUE(contains(what, "rank 1")) << what;
  }
}

TEST(MpiMismatchTest, LargerMessageThanReceiveBufferNamesBothSizes) {
  auto comm = testing::make_communicator();
  if (comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  std::vector<float> data(10000, 2.0f);
  if (comm->rank() == 0) {
    comm->send(data.data(), 10000, DType::kF32, 1, 5);
  } else if (comm->rank() == 1) {
    try {
      comm->recv(data.data(), 5000, DType::kF32, 0, 5);
      ADD_FAILURE() << "expected CommError";
    } catch (const CommTimeoutError& e) {
      ADD_FAILURE() << "timeout instead of a size error: " << e.what();
    } catch (const CommError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "40000 bytes")) << what;
      EXPECT_TRUE(contains(what, "20000 bytes")) << what;
    }
  }
}

}  // namespace
}  // namespace dtrain::comm
