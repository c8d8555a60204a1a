#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/inproc/transport.h"
#include "dtrain/comm/transport/inproc/world.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

Clock::time_point soon() { return Clock::now() + 5s; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(InprocTransportTest, SmallAndLargeMessagesArriveEitherOrder) {
  auto world = InprocWorld::create(2);
  auto a = world->transport(0);
  auto b = world->transport(1);
  EXPECT_EQ(a->name(), "inproc");
  EXPECT_EQ(b->rank(), 1);
  EXPECT_EQ(b->size(), 2);
  for (std::size_t n : {std::size_t{0}, std::size_t{8}, InprocWorld::kEagerBytes,
                        InprocWorld::kEagerBytes + 1, std::size_t{100000}}) {
    std::vector<std::uint8_t> out(n);
    std::iota(out.begin(), out.end(), static_cast<std::uint8_t>(n));
    // Send first.
    std::vector<std::uint8_t> in(n, 0);
    auto send = a->isend(1, 7, out.data(), n);
    // A small send completes before any receive exists; a large one waits for the receiver.
    EXPECT_EQ(send->test(), n <= InprocWorld::kEagerBytes) << n;
    auto recv = b->irecv(0, 7, in.data(), n);
    recv->wait(soon());
    send->wait(soon());
    EXPECT_EQ(in, out) << n;
    // Receive first.
    std::vector<std::uint8_t> in2(n, 0);
    auto recv2 = b->irecv(0, 8, in2.data(), n);
    EXPECT_FALSE(recv2->test());
    auto send2 = a->isend(1, 8, out.data(), n);
    send2->wait(soon());
    recv2->wait(soon());
    EXPECT_EQ(in2, out) << n;
  }
}

TEST(InprocTransportTest, FifoPerSourceAndTagAndTagsDoNotMix) {
  auto world = InprocWorld::create(2);
  auto a = world->transport(0);
  auto b = world->transport(1);
  std::vector<std::unique_ptr<Request>> sends;
  const std::vector<int> values = {10, 11, 12, 20, 21};
  const std::vector<std::uint64_t> tags = {1, 1, 1, 2, 2};
  for (std::size_t k = 0; k < values.size(); ++k) {
    sends.push_back(a->isend(1, tags[k], &values[k], sizeof(int)));
  }
  int x = 0;
  b->irecv(0, 2, &x, sizeof(x))->wait(soon());
  EXPECT_EQ(x, 20);
  for (int want : {10, 11, 12}) {
    b->irecv(0, 1, &x, sizeof(x))->wait(soon());
    EXPECT_EQ(x, want);
  }
  b->irecv(0, 2, &x, sizeof(x))->wait(soon());
  EXPECT_EQ(x, 21);
  for (auto& s : sends) s->wait(soon());
}

TEST(InprocTransportTest, ShortReceiveBufferFailsBothSidesNamingSizes) {
  auto world = InprocWorld::create(2);
  std::vector<char> big(1000, 'x');
  std::vector<char> small(996);
  auto send = world->transport(0)->isend(1, 3, big.data(), big.size());
  auto recv = world->transport(1)->irecv(0, 3, small.data(), small.size());
  try {
    recv->wait(soon());
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "1000 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "996 bytes")) << e.what();
  }
  EXPECT_THROW(send->wait(soon()), CommError);
  // A longer buffer is fine: the message fills its front.
  int value = 42;
  std::vector<int> room(4, -1);
  world->transport(0)->isend(1, 4, &value, sizeof(value))->wait(soon());
  world->transport(1)->irecv(0, 4, room.data(), room.size() * sizeof(int))->wait(soon());
  EXPECT_EQ(room, (std::vector<int>{42, -1, -1, -1}));
}

TEST(InprocTransportTest, WaitHonoursDeadlineAndNamesPeer) {
  auto world = InprocWorld::create(3);
  int x = 0;
  auto recv = world->transport(1)->irecv(2, 9, &x, sizeof(x));
  const auto start = Clock::now();
  try {
    recv->wait(start + 50ms);
    FAIL() << "expected timeout";
  } catch (const CommTimeoutError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 1: recv from rank 2")) << e.what();
  }
  const auto waited = Clock::now() - start;
  EXPECT_GE(waited, 50ms);
  EXPECT_LT(waited, 2s);
  // The timed-out receive was cancelled with its request: a later message goes to a new receive.
  recv.reset();
  int y = 5;
  world->transport(2)->isend(1, 9, &y, sizeof(y))->wait(soon());
  world->transport(1)->irecv(2, 9, &x, sizeof(x))->wait(soon());
  EXPECT_EQ(x, 5);
}

TEST(InprocTransportTest, AbortFailsPendingAndFutureOperationsPromptly) {
  auto world = InprocWorld::create(3);
  std::vector<char> buffer(4096);
  auto pending_recv = world->transport(0)->irecv(2, 1, buffer.data(), buffer.size());
  auto pending_send = world->transport(1)->isend(2, 1, buffer.data(), buffer.size());
  std::thread aborter([&] {
    std::this_thread::sleep_for(20ms);
    world->abort(2, "rank 2 threw: boom");
  });
  const auto start = Clock::now();
  try {
    pending_recv->wait(start + 10s);
    FAIL() << "expected CommError";
  } catch (const CommTimeoutError&) {
    FAIL() << "an abort must not look like a timeout";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "rank 2 aborted: rank 2 threw: boom")) << e.what();
  }
  EXPECT_LT(Clock::now() - start, 5s);
  aborter.join();
  EXPECT_THROW(pending_send->wait(soon()), CommError);
  // Future operations with the aborted rank fail at once; others are unaffected.
  EXPECT_THROW(world->transport(0)->isend(2, 5, buffer.data(), 8)->wait(soon()), CommError);
  EXPECT_THROW(world->transport(0)->irecv(2, 5, buffer.data(), 8)->wait(soon()), CommError);
  int v = 3;
  int w = 0;
  world->transport(0)->isend(1, 5, &v, sizeof(v))->wait(soon());
  world->transport(1)->irecv(0, 5, &w, sizeof(w))->wait(soon());
  EXPECT_EQ(w, 3);
  EXPECT_EQ(world->abort_reason(2).value_or(""), "rank 2 threw: boom");
  EXPECT_FALSE(world->abort_reason(1).has_value());
}

TEST(InprocTransportTest, SmallMessageSentBeforeExitIsStillDelivered) {
  auto world = InprocWorld::create(2);
  int v = 17;
  world->transport(0)->isend(1, 1, &v, sizeof(v))->wait(soon());
  world->abort(0, "rank 0 exited");
  int w = 0;
  world->transport(1)->irecv(0, 1, &w, sizeof(w))->wait(soon());
  EXPECT_EQ(w, 17);
  EXPECT_THROW(world->transport(1)->irecv(0, 1, &w, sizeof(w))->wait(soon()), CommError);
}

TEST(InprocTransportTest, ManyThreadsExchangeConcurrently) {
  // Every rank sends a large and a small message to every other rank, from two threads each.
  constexpr int kRanks = 4;
  constexpr std::size_t kLarge = 20000;
  auto world = InprocWorld::create(kRanks);
  std::vector<std::thread> threads;
  std::vector<int> failures(kRanks * 2, 0);
  for (int t = 0; t < kRanks * 2; ++t) {
    threads.emplace_back([&, t] {
      const int rank = t % kRanks;
      const std::uint64_t tag = static_cast<std::uint64_t>(t / kRanks);
      auto transport = world->transport(rank);
      std::vector<std::vector<int>> out(kRanks, std::vector<int>(kLarge / sizeof(int), rank));
      std::vector<std::vector<int>> in(kRanks, std::vector<int>(kLarge / sizeof(int), -1));
      std::vector<std::unique_ptr<Request>> requests;
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == rank) continue;
        requests.push_back(transport->irecv(peer, tag, in[peer].data(), kLarge));
        requests.push_back(transport->isend(peer, tag, out[peer].data(), kLarge));
      }
      for (auto& r : requests) r->wait(soon());
      for (int peer = 0; peer < kRanks; ++peer) {
        if (peer == rank) continue;
        for (int x : in[peer]) failures[t] += x != peer;
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int f : failures) EXPECT_EQ(f, 0);
}

TEST(InprocTransportTest, BadArgumentsAreConfigErrors) {
  EXPECT_THROW(InprocWorld::create(0), ConfigError);
  auto world = InprocWorld::create(2);
  EXPECT_THROW(world->transport(2), ConfigError);
  int x = 0;
  EXPECT_THROW(world->transport(0)->isend(5, 0, &x, sizeof(x)), ConfigError);
  EXPECT_THROW(world->transport(0)->irecv(-1, 0, &x, sizeof(x)), ConfigError);
}

}  // namespace
}  // namespace dtrain::comm
