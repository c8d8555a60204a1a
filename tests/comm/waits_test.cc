// Every wait says what it waits for and holds its deadline: a peer that stops in the middle of a
// transfer is named in a stall warning (the op, its sequence number, the peer) before the deadline
// error names the same; ranks that are threads end at the first error's deadline even when one of
// them sleeps or cannot be joined.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/rank_threads.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/inproc/world.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A rank that stops in the middle of a transfer: its n-th send blocks until released (or 10 s).
class StoppingTransport : public Transport {
 public:
  StoppingTransport(std::shared_ptr<Transport> inner, int stop_at, std::atomic<bool>& released)
      : inner_(std::move(inner)), stop_at_(stop_at), released_(released) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view name() const override { return "stopping"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override {
    if (++sends_ == stop_at_) {
      const auto give_up = Clock::now() + 10s;
      while (!released_.load() && Clock::now() < give_up) std::this_thread::sleep_for(2ms);
      throw CommError("stopped in the middle of the transfer");
    }
    return inner_->isend(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override {
    return inner_->irecv(peer, tag, data, bytes);
  }

 private:
  std::shared_ptr<Transport> inner_;
  int stop_at_;
  std::atomic<bool>& released_;
  int sends_ = 0;
};

TEST(StallWarningTest, APeerThatStopsMidTransferIsNamedBeforeTheDeadline) {
  for (const char* algorithm : {"ring", "halving-doubling", "tree"}) {
    auto world = InprocWorld::create(2);
    CommOptions options;
    options.timeout = 1500ms;
    options.stall_warning = 200ms;
    options.segment_bytes = 4096;
    options.allreduce_algorithm = algorithm;
    std::atomic<bool> released{false};
    std::string error;
    double seconds = 0;
    ::testing::internal::CaptureStderr();
    std::vector<std::thread> threads;
    for (int rank = 0; rank < 2; ++rank) {
      threads.emplace_back([&, rank] {
        std::shared_ptr<Transport> transport = world->transport(rank);
        // Rank 1's first send is its header; it stops at its first data send.
        if (rank == 1) transport = std::make_shared<StoppingTransport>(transport, 2, released);
        Communicator comm(transport, options);
        std::vector<float> data(100000, 1.0f);
        const auto start = Clock::now();
        try {
          comm.allreduce(data.data(), 100000, DType::kF32, ReduceOp::kSum);
        } catch (const CommError& e) {
          if (rank == 0) {
            error = e.what();
            seconds = std::chrono::duration<double>(Clock::now() - start).count();
            released = true;
          }
          world->abort(rank, e.what());
        }
      });
    }
    for (auto& t : threads) t.join();
    const std::string log = ::testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(log, "stall: rank 0 has waited")) << algorithm << ": " << log;
    EXPECT_TRUE(contains(log, "in allreduce #0 (" + std::string(algorithm))) << log;
    EXPECT_TRUE(contains(log, "rank 1")) << log;
    EXPECT_TRUE(contains(log, "(the call fails at 1.5 s)")) << log;
    EXPECT_EQ(log.find("stall:"), log.rfind("stall:")) << "one warning per call: " << log;
    EXPECT_TRUE(contains(error, "allreduce #0 (" + std::string(algorithm))) << error;
    EXPECT_TRUE(contains(error, "rank 1")) << error;
    EXPECT_TRUE(contains(error, "deadline")) << error;
    EXPECT_GE(seconds, 1.4) << algorithm << ": the warning must not end the wait";
    EXPECT_LT(seconds, 6.5) << algorithm;
  }
}

TEST(StallWarningTest, PendingMessageAndBlockingRecvWarnNamingThePeer) {
  CommOptions options;
  options.timeout = 800ms;
  options.stall_warning = 100ms;
  options.timeout_setting = "--timeout";
  std::string errors[2];
  std::atomic<bool> rank0_done{false};
  ::testing::internal::CaptureStderr();
  spawn_ranks(
      2,
      [&](Communicator& comm) {
        if (comm.rank() == 1) {
          // Never sends; stays until rank 0 has given up on both receives (at most 10 s).
          const auto give_up = Clock::now() + 10s;
          while (!rank0_done.load() && Clock::now() < give_up) std::this_thread::sleep_for(2ms);
          return;
        }
        std::vector<float> buffer(5);
        PendingMessage message = comm.irecv(buffer.data(), 5, DType::kF32, 1, 7);
        try {
          message.wait();
        } catch (const CommTimeoutError& e) {
          errors[0] = e.what();
        }
        try {
          comm.recv(buffer.data(), 5, DType::kF32, 1, 8);
        } catch (const CommTimeoutError& e) {
          errors[1] = e.what();
        }
        rank0_done = true;
      },
      options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(contains(log, "stall: rank 0 has waited")) << log;
  EXPECT_TRUE(contains(log, "in irecv from rank 1 (5 x f32, tag 7)")) << log;
  EXPECT_TRUE(contains(log, "in recv from rank 1 (5 x f32, tag 8)")) << log;
  EXPECT_TRUE(contains(errors[0], "irecv from rank 1")) << errors[0];
  EXPECT_TRUE(contains(errors[1], "recv from rank 1")) << errors[1];
  // Point-to-point deadlines say the deadline and the setting too.
  for (const std::string& error : errors) {
    EXPECT_TRUE(contains(error,
                         "; the deadline is 0.8 s: a rank died or is stuck (raise "
                         "--timeout if it is only slow)"))
        << error;
  }
}

TEST(StallWarningTest, SilentWhenThePeerIsOnTime) {
  CommOptions options;
  options.stall_warning = 5s;
  ::testing::internal::CaptureStderr();
  spawn_ranks(
      3,
      [](Communicator& comm) {
        std::vector<float> data(10000, 1.0f);
        comm.allreduce(data.data(), 10000, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(data[0], 3.0f);
      },
      options);
  EXPECT_FALSE(contains(::testing::internal::GetCapturedStderr(), "stall:"));
}

TEST(RankThreadsTest, AnInjectedSleepEndsWhenAnotherRankFails) {
  std::atomic<bool> slept_fully{true};
  const auto start = Clock::now();
  EXPECT_THROW(spawn_ranks(2,
                           [&](Communicator& comm) {
                             if (comm.rank() == 0) throw CommError("rank 0 gave up");
                             slept_fully = sleep_unless_aborted(60s);
                             float value = 0;
                             comm.recv(&value, 1, DType::kF32, 0);  // fails at once: rank 0 is gone
                           }),
               CommError);
  EXPECT_FALSE(slept_fully.load());
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_EQ(detached_rank_threads(), 0);
}

TEST(RankThreadsTest, AThreadThatCannotBeJoinedIsLeftRunningAndTheErrorRethrownAfterTheGrace) {
  auto sleeper_done = std::make_shared<std::atomic<bool>>(false);
  const auto start = Clock::now();
  try {
    spawn_ranks(
        2,
        [sleeper_done](Communicator& comm) {
          if (comm.rank() == 0) throw ConfigError("the first error");
          std::this_thread::sleep_for(3s);  // a sleep nothing can end
          *sleeper_done = true;
        },
        {}, RankPinning::kNever, 200ms);
    ADD_FAILURE() << "spawn_ranks must rethrow rank 0's error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0: the first error")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 2500ms) << "it must not wait for the 3-s sleeper";
  EXPECT_FALSE(sleeper_done->load());
  EXPECT_EQ(detached_rank_threads(), 1);
  const auto give_up = Clock::now() + 10s;
  while (detached_rank_threads() > 0 && Clock::now() < give_up) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(detached_rank_threads(), 0) << "a detached thread is no longer counted once it ends";
  EXPECT_TRUE(sleeper_done->load());
}

}  // namespace
}  // namespace dtrain::comm
