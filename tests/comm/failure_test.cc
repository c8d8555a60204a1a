// Nothing hangs and mistakes are named: ranks that never arrive, ranks that exit or throw in the
// middle of a collective, and ranks whose arguments disagree.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/inproc/world.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// What each rank saw: its error message ("" if none), its error type, how long the call took.
struct Outcome {
  std::string error;
  bool timeout = false;
  double seconds = 0;
};

// Blocks a rank that plays "never arrives" until every other rank has its outcome (at most 10 s),
// so the test takes as long as the failures do, not a fixed sleep.
using WaitForOthers = std::function<void()>;

// Runs `body` on P ranks; each rank's CommError is caught and recorded, not rethrown.
std::vector<Outcome> run_ranks(
    int ranks, CommOptions options,
    const std::function<void(Communicator&, const WaitForOthers&)>& body) {
  std::vector<Outcome> outcomes(static_cast<std::size_t>(ranks));
  std::atomic<int> finished{0};
  const WaitForOthers wait_for_others = [&] {
    const auto give_up = Clock::now() + 10s;
    while (finished.load() < ranks - 1 && Clock::now() < give_up) std::this_thread::sleep_for(2ms);
  };
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        Outcome& outcome = outcomes[static_cast<std::size_t>(comm.rank())];
        const auto start = Clock::now();
        try {
          body(comm, wait_for_others);
        } catch (const CommTimeoutError& e) {
          outcome.error = e.what();
          outcome.timeout = true;
        } catch (const CommError& e) {
          outcome.error = e.what();
        }
        outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
        finished.fetch_add(1);
      },
      options);
  return outcomes;
}

// Long enough that a healthy collective never hits it on a loaded 2-core CI machine under a
// sanitizer (a rank thread may be descheduled for tens of ms), short enough to keep the suite fast.
CommOptions short_timeout() {
  CommOptions options;
  options.timeout = 1000ms;
  return options;
}

TEST(NeverArrivesTest, OthersFailWithinTheTimeoutNamingTheMissingRank) {
  constexpr int kRanks = 4;
  constexpr int kMissing = 2;
  const auto outcomes = run_ranks(
      kRanks, short_timeout(), [](Communicator& comm, const WaitForOthers& wait_for_others) {
        std::vector<float> data(1000, 1.0f);
        comm.allreduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);  // #0: everyone
        if (comm.rank() == kMissing) {
          wait_for_others();  // misses #1 until the others have failed
          return;
        }
        comm.allreduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);  // #1
      });
  for (int r = 0; r < kRanks; ++r) {
    const Outcome& o = outcomes[static_cast<std::size_t>(r)];
    if (r == kMissing) {
      EXPECT_EQ(o.error, "");
      continue;
    }
    EXPECT_TRUE(contains(o.error, "allreduce #1")) << o.error;
    EXPECT_TRUE(contains(o.error, "missing rank(s): 2")) << o.error;
    // The deadline and what raises it, once (the error passes two prefixes on its way up).
    const std::string advice =
        "; the deadline is 1 s: a rank died or is stuck (raise parallel.comm_timeout_seconds if "
        "it is only slow)";
    EXPECT_TRUE(o.error.size() >= advice.size() &&
                o.error.compare(o.error.size() - advice.size(), advice.size(), advice) == 0)
        << o.error;
    EXPECT_EQ(o.error.find("; the deadline is "), o.error.rfind("; the deadline is ")) << o.error;
    EXPECT_TRUE(o.timeout) << o.error;
    EXPECT_LT(o.seconds, 6.0) << "rank " << r << " must fail near the 1 s deadline";
  }
}

TEST(NeverArrivesTest, MissingHeaderRootIsNamedToo) {
  const auto outcomes =
      run_ranks(3, short_timeout(), [](Communicator& comm, const WaitForOthers& wait_for_others) {
        if (comm.rank() == 0) {
          wait_for_others();
          return;
        }
        comm.barrier();
      });
  for (int r = 1; r < 3; ++r) {
    const Outcome& o = outcomes[static_cast<std::size_t>(r)];
    EXPECT_TRUE(o.timeout) << o.error;
    EXPECT_TRUE(contains(o.error, "barrier #0")) << o.error;
    EXPECT_TRUE(contains(o.error, "missing rank(s): 0")) << o.error;
    EXPECT_TRUE(contains(o.error, "; the deadline is 1 s: a rank died or is stuck")) << o.error;
    EXPECT_LT(o.seconds, 6.0);
  }
}

TEST(NeverArrivesTest, WithoutHeaderCheckEveryAlgorithmStillFailsByItsDeadline) {
  for (const char* algorithm : {"ring", "parameter-server", "sharded-ps", "tree",
                                "halving-doubling", "double-binary-tree", "hierarchical", "auto"}) {
    CommOptions options = short_timeout();
    options.local_size = 2;
    options.check_headers = false;
    options.allreduce_algorithm = algorithm;
    const auto outcomes =
        run_ranks(5, options, [](Communicator& comm, const WaitForOthers& wait_for_others) {
          std::vector<double> data(3000, 1.0);
          if (comm.rank() == 3) {
            wait_for_others();
            return;
          }
          comm.allreduce(data.data(), 3000, DType::kF64, ReduceOp::kSum);
        });
    for (int r = 0; r < 5; ++r) {
      if (r == 3) continue;
      const Outcome& o = outcomes[static_cast<std::size_t>(r)];
      // Every rank needs rank 3's data: it times out naming the op and the peer it waited for,
      // or fails at once when that peer gave up first and returned.
      EXPECT_TRUE(contains(o.error, "allreduce #0")) << algorithm << ": " << o.error;
      EXPECT_TRUE(contains(o.error, "did not complete before its deadline") ||
                  contains(o.error, "aborted"))
          << algorithm << ": " << o.error;
      EXPECT_LT(o.seconds, 6.0) << algorithm << " rank " << r;
    }
  }
}

TEST(ExitedRankTest, OthersFailPromptlyNotAtTheDeadline) {
  CommOptions options;
  options.timeout = 20s;
  const auto outcomes = run_ranks(3, options, [](Communicator& comm, const WaitForOthers&) {
    if (comm.rank() == 1) return;  // leaves without calling the collective
    std::vector<float> data(5000, 1.0f);
    comm.allreduce(data.data(), 5000, DType::kF32, ReduceOp::kSum);
  });
  for (int r : {0, 2}) {
    const Outcome& o = outcomes[static_cast<std::size_t>(r)];
    EXPECT_TRUE(contains(o.error, "rank 1 exited")) << o.error;
    EXPECT_FALSE(o.timeout);
    EXPECT_LT(o.seconds, 10.0);
  }
}

TEST(ThrowingRankTest, SpawnRanksRethrowsTheFirstErrorWithItsRank) {
  CommOptions options;
  options.timeout = 20s;
  const auto start = Clock::now();
  try {
    spawn_ranks(
        4,
        [](Communicator& comm) {
          std::vector<float> data(1000, 1.0f);
          comm.allreduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);
          if (comm.rank() == 3) throw std::runtime_error("injected failure");
          comm.allreduce(data.data(), 1000, DType::kF32, ReduceOp::kSum);
        },
        options);
    FAIL() << "expected an error";
  } catch (const CommError& e) {
    EXPECT_EQ(std::string(e.what()), "rank 3: injected failure");
  }
  EXPECT_LT(Clock::now() - start, 5s) << "the others must not wait for their 20 s deadline";
}

// A transport that throws on its n-th send: a rank failing in the middle of an algorithm.
class FailingTransport : public Transport {
 public:
  FailingTransport(std::shared_ptr<Transport> inner, int fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view name() const override { return "failing"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override {
    if (++sends_ == fail_at_) throw CommError("injected send failure");
    return inner_->isend(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override {
    return inner_->irecv(peer, tag, data, bytes);
  }

 private:
  std::shared_ptr<Transport> inner_;
  int fail_at_;
  int sends_ = 0;
};

TEST(ThrowingRankTest, FailureInsideTheRingMakesTheOthersFailPromptly) {
  for (const char* algorithm : {"ring", "sharded-ps", "halving-doubling", "tree"}) {
    constexpr int kRanks = 4;
    constexpr int kFailing = 1;
    auto world = InprocWorld::create(kRanks);
    CommOptions options;
    options.timeout = 20s;
    options.segment_bytes = 4096;
    options.check_headers = false;
    options.allreduce_algorithm = algorithm;
    std::vector<Outcome> outcomes(kRanks);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < kRanks; ++rank) {
      threads.emplace_back([&, rank] {
        std::shared_ptr<Transport> transport = world->transport(rank);
        // The tree's rank 1 sends once (to rank 0); the others fail at their third send.
        const int fail_at = std::string(algorithm) == "tree" ? 1 : 3;
        if (rank == kFailing) transport = std::make_shared<FailingTransport>(transport, fail_at);
        Communicator comm(transport, options);
        std::vector<float> data(100000, 1.0f);
        const auto start = Clock::now();
        try {
          comm.allreduce(data.data(), 100000, DType::kF32, ReduceOp::kSum);
        } catch (const CommError& e) {
          outcomes[static_cast<std::size_t>(rank)].error = e.what();
          world->abort(rank, std::string("rank threw: ") + e.what());
        }
        outcomes[static_cast<std::size_t>(rank)].seconds =
            std::chrono::duration<double>(Clock::now() - start).count();
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_TRUE(contains(outcomes[kFailing].error, "injected send failure"))
        << outcomes[kFailing].error;
    for (int r = 0; r < kRanks; ++r) {
      const Outcome& o = outcomes[static_cast<std::size_t>(r)];
      EXPECT_LT(o.seconds, 10.0) << algorithm << " rank " << r;
      // Ranks that needed the failed one say so; a rank that finished first may have no error.
      if (r != kFailing && !o.error.empty()) {
        EXPECT_TRUE(contains(o.error, "aborted")) << algorithm << ": " << o.error;
        EXPECT_TRUE(contains(o.error, "injected send failure")) << algorithm << ": " << o.error;
      }
    }
    EXPECT_FALSE(outcomes[(kFailing + 1) % kRanks].error.empty() &&
                 outcomes[(kFailing + 3) % kRanks].error.empty())
        << algorithm << ": somebody depended on rank 1";
  }
}

struct MismatchCase {
  const char* name;
  std::function<void(Communicator&, bool odd)> call;
  std::vector<std::string> expected_parts;
};

TEST(StallInspectorTest, RankZeroNamesTheLateRanksThenTheCallSucceeds) {
  CommOptions options;
  options.stall_warning = 50ms;
  options.timeout = 20s;
  ::testing::internal::CaptureStderr();
  spawn_ranks(
      3,
      [](Communicator& comm) {
        if (comm.rank() == 2) std::this_thread::sleep_for(400ms);
        float value = 1.0f;
        comm.allreduce(&value, 1, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(value, 3.0f);
      },
      options);
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("stall:"), std::string::npos) << log;
  EXPECT_NE(log.find("allreduce #"), std::string::npos) << log;
  EXPECT_NE(log.find("rank(s) 2 have not arrived"), std::string::npos) << log;
}

TEST(StallInspectorTest, SilentWhenEveryRankIsOnTime) {
  CommOptions options;
  options.stall_warning = 5s;
  ::testing::internal::CaptureStderr();
  spawn_ranks(
      3,
      [](Communicator& comm) {
        float value = 1.0f;
        comm.allreduce(&value, 1, DType::kF32, ReduceOp::kSum);
      },
      options);
  EXPECT_EQ(::testing::internal::GetCapturedStderr().find("stall:"), std::string::npos);
}

TEST(HeaderCheckTest, MismatchedArgumentsAreNamedWithBothValuesAndRanks) {
  const std::vector<MismatchCase> cases = {
      {"count",
       [](Communicator& comm, bool odd) {
         std::vector<float> data(1000);
         comm.allreduce(data.data(), odd ? 999 : 1000, DType::kF32, ReduceOp::kSum);
       },
       {"rank 2 called it with count 999 but rank 0 with count 1000"}},
      {"dtype",
       [](Communicator& comm, bool odd) {
         std::vector<double> data(100);
         comm.allreduce(data.data(), 100, odd ? DType::kF64 : DType::kF32, ReduceOp::kSum);
       },
       {"dtype f64", "dtype f32", "rank 2", "rank 0"}},
      {"op",
       [](Communicator& comm, bool odd) {
         std::vector<float> data(100);
         comm.allreduce(data.data(), 100, DType::kF32, odd ? ReduceOp::kMax : ReduceOp::kSum);
       },
       {"op max", "op sum", "rank 2", "rank 0"}},
      {"algorithm",
       [](Communicator& comm, bool odd) {
         std::vector<float> data(100);
         CollectiveOptions options;
         options.algorithm = odd ? "tree" : "ring";
         comm.allreduce(data.data(), 100, DType::kF32, ReduceOp::kSum, options);
       },
       {"algorithm tree", "algorithm ring", "rank 2", "rank 0"}},
      {"collective",
       [](Communicator& comm, bool odd) {
         std::vector<float> data(100);
         if (odd) {
           comm.broadcast(data.data(), 100, DType::kF32, 0);
         } else {
           comm.allreduce(data.data(), 100, DType::kF32, ReduceOp::kSum);
         }
       },
       {"rank 2 called broadcast but rank 0 called allreduce"}},
      {"root",
       [](Communicator& comm, bool odd) {
         std::vector<float> data(100);
         comm.broadcast(data.data(), 100, DType::kF32, odd ? 1 : 0);
       },
       {"root 1", "root 0", "rank 2", "rank 0"}},
  };
  CommOptions options;
  options.timeout = 10s;
  for (const auto& c : cases) {
    const auto outcomes = run_ranks(3, options, [&](Communicator& comm, const WaitForOthers&) {
      c.call(comm, comm.rank() == 2);
    });
    for (int r = 0; r < 3; ++r) {
      const std::string& error = outcomes[static_cast<std::size_t>(r)].error;
      EXPECT_FALSE(outcomes[static_cast<std::size_t>(r)].timeout) << c.name;
      for (const auto& part : c.expected_parts) {
        EXPECT_TRUE(contains(error, part)) << c.name << " rank " << r << ": " << error;
      }
      EXPECT_LT(outcomes[static_cast<std::size_t>(r)].seconds, 10.0);
    }
  }
}

TEST(HeaderCheckTest, ACallCanSkipItAndSendsNoHeaders) {
  spawn_ranks(3, [](Communicator& comm) {
    CollectiveOptions unchecked;
    unchecked.check_header = false;
    float value = 1.0f;
    comm.allreduce(&value, 1, DType::kF32, ReduceOp::kSum, unchecked);
    EXPECT_EQ(value, 3.0f);
    EXPECT_EQ(comm.stats().get("header_check").calls, 0);
    comm.allreduce(&value, 1, DType::kF32, ReduceOp::kSum);  // checked by default
    EXPECT_EQ(comm.stats().get("header_check").calls, 1);
  });
}

TEST(HeaderCheckTest, WithoutItAMismatchedCountIsASizeErrorNotGarbage) {
  CommOptions options;
  options.timeout = 2s;
  options.check_headers = false;
  const auto outcomes = run_ranks(2, options, [](Communicator& comm, const WaitForOthers&) {
    std::vector<float> data(1000);
    comm.allreduce(data.data(), comm.rank() == 1 ? 1000 : 998, DType::kF32, ReduceOp::kSum,
                   CollectiveOptions{"parameter-server", {}, 0});
  });
  // Rank 1 sends 4000 bytes into rank 0's 3992-byte receive: both sizes are named.
  EXPECT_TRUE(contains(outcomes[0].error, "4000 bytes")) << outcomes[0].error;
  EXPECT_TRUE(contains(outcomes[0].error, "3992 bytes")) << outcomes[0].error;
}

TEST(CommOptionsTest, TimeoutComesFromTheEnvironment) {
  ::setenv("DTRAIN_COMM_TIMEOUT_MS", "1234", 1);
  EXPECT_EQ(default_comm_timeout(), 1234ms);
  ::setenv("DTRAIN_COMM_TIMEOUT_MS", "0", 1);
  EXPECT_THROW(default_comm_timeout(), ConfigError);
  ::setenv("DTRAIN_COMM_TIMEOUT_MS", "soon", 1);
  EXPECT_THROW(default_comm_timeout(), ConfigError);
  ::unsetenv("DTRAIN_COMM_TIMEOUT_MS");
  EXPECT_EQ(default_comm_timeout(), 60000ms);
}

}  // namespace
}  // namespace dtrain::comm
