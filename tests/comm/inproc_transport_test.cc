#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "comm_test_values.h"
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

TEST(InprocTransportTest, CancellingAQueuedSendFailsTheLaterOnesOfItsStream) {
  // A sender that fails cancels its queued sends; had the second one stayed, the receiver would
  // match it in place of the first (another size): a broken FIFO stream must not deliver.
  auto world = InprocWorld::create(2);
  std::vector<std::byte> first(4096), second(1000), other_tag(1000), buffer(4096);
  auto send_first = world->transport(0)->isend(1, 7, first.data(), first.size());
  auto send_second = world->transport(0)->isend(1, 7, second.data(), second.size());
  auto send_other = world->transport(0)->isend(1, 8, other_tag.data(), other_tag.size());
  send_first.reset();  // cancelled while queued
  try {
    send_second->wait(soon());
    FAIL() << "the later send of the broken stream should fail";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "earlier send of the same rank pair and tag was cancelled"))
        << e.what();
  }
  // The receiver finds nothing of tag 7 (it times out rather than take the 1000-byte message)...
  auto recv = world->transport(1)->irecv(0, 7, buffer.data(), buffer.size());
  EXPECT_THROW(recv->wait(Clock::now() + 50ms), CommTimeoutError);
  // ...and other tags are untouched.
  world->transport(1)->irecv(0, 8, buffer.data(), other_tag.size())->wait(soon());
  send_other->wait(soon());
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

// Forwards isend/irecv only, so irecv_reduce takes Transport's default (receive into a
// temporary, then reduce): the path every transport without a fused receive-reduce uses.
class PlainTransport : public Transport {
 public:
  explicit PlainTransport(std::shared_ptr<Transport> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view name() const override { return "plain"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override {
    return inner_->isend(peer, tag, data, bytes);
  }
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override {
    return inner_->irecv(peer, tag, data, bytes);
  }

 private:
  std::shared_ptr<Transport> inner_;
};

// Counts that take each path of the inproc transport: buffered (<= kEagerBytes), copied by the
// thread that posts second (<= kCopyOnMatchBytes), claimed by the first owner to wait (larger);
// odd counts leave a tail after any vector width.
std::vector<std::int64_t> reduce_counts(DType dtype) {
  const auto element = static_cast<std::int64_t>(dtype_size(dtype));
  const auto eager = static_cast<std::int64_t>(InprocWorld::kEagerBytes) / element;
  const auto copy_on_match = static_cast<std::int64_t>(InprocWorld::kCopyOnMatchBytes) / element;
  return {1, 7, eager, eager + 1, 1001, copy_on_match + 1, 100003};
}

// Rank 1 reduces rank 0's message into its own contribution with irecv_reduce; checks the
// result element by element against the closed form (kAvg reduces as a sum).
void check_receive_reduce(Transport& sender, Transport& receiver, DType dtype, ReduceOp op,
                          std::int64_t count, bool send_first) {
  using namespace testing;
  auto message = make_buffer(count, dtype);
  auto acc = make_buffer(count, dtype);
  fill_contribution(message, 0, 2, count, dtype, op);
  fill_contribution(acc, 1, 2, count, dtype, op);
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  const std::uint64_t tag = 40 + static_cast<std::uint64_t>(op);
  std::unique_ptr<Request> send;
  std::unique_ptr<Request> recv;
  if (send_first) {
    send = sender.isend(1, tag, message.data(), bytes);
    recv = receiver.irecv_reduce(0, tag, acc.data(), bytes, dtype, op);
  } else {
    recv = receiver.irecv_reduce(0, tag, acc.data(), bytes, dtype, op);
    send = sender.isend(1, tag, message.data(), bytes);
  }
  recv->wait(soon());
  send->wait(soon());
  const ReduceOp as = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  EXPECT_EQ(first_mismatch(acc.data(), 2, count, dtype, as), -1)
      << receiver.name() << " " << dtype_name(dtype) << " " << reduce_op_name(op) << " count "
      << count << (send_first ? " send first" : " receive first");
  EXPECT_EQ(acc.back(), 0) << "wrote past the end";
}

TEST(InprocTransportTest, ReceiveReduceIsExactForEveryDtypeOpAndSizeFusedAndDefault) {
  auto world = InprocWorld::create(2);
  auto fused_sender = world->transport(0);
  auto fused_receiver = world->transport(1);
  PlainTransport plain_sender(world->transport(0));
  PlainTransport plain_receiver(world->transport(1));
  for (DType dtype : testing::kAllDTypes) {
    for (ReduceOp op : testing::kAllOps) {
      for (std::int64_t count : reduce_counts(dtype)) {
        for (bool send_first : {true, false}) {
          check_receive_reduce(*fused_sender, *fused_receiver, dtype, op, count, send_first);
          check_receive_reduce(plain_sender, plain_receiver, dtype, op, count, send_first);
        }
      }
    }
  }
}

TEST(InprocTransportTest, ReceiveReduceFromAnotherThreadMatchesTheDefaultPath) {
  // The same large reductions with the two ranks on two threads, so that matching, claiming and
  // reducing race for real; the fused and default paths must give identical bytes.
  constexpr std::int64_t kCount = 300001;
  auto world = InprocWorld::create(2);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kI64}) {
    std::vector<std::vector<unsigned char>> results;
    for (bool fused : {true, false}) {
      auto message = testing::make_buffer(kCount, dtype);
      auto acc = testing::make_buffer(kCount, dtype);
      testing::fill_contribution(message, 0, 2, kCount, dtype, ReduceOp::kSum);
      testing::fill_contribution(acc, 1, 2, kCount, dtype, ReduceOp::kSum);
      const std::size_t bytes = static_cast<std::size_t>(kCount) * dtype_size(dtype);
      std::thread sender(
          [&] { world->transport(0)->isend(1, 5, message.data(), bytes)->wait(soon()); });
      std::shared_ptr<Transport> receiver = world->transport(1);
      if (!fused) receiver = std::make_shared<PlainTransport>(receiver);
      receiver->irecv_reduce(0, 5, acc.data(), bytes, dtype, ReduceOp::kSum)->wait(soon());
      sender.join();
      EXPECT_EQ(testing::first_mismatch(acc.data(), 2, kCount, dtype, ReduceOp::kSum), -1)
          << dtype_name(dtype) << (fused ? " fused" : " default");
      results.push_back(acc);
    }
    EXPECT_EQ(results[0], results[1]) << dtype_name(dtype);
  }
}

TEST(InprocTransportTest, ReceiveReduceNeedsTheExactSizeAndWholeElements) {
  auto world = InprocWorld::create(2);
  std::vector<float> message(1000, 1.0f);
  std::vector<float> acc(1001, 2.0f);
  // A longer reducing receive would leave elements unreduced: both sides fail, naming both sizes.
  auto send = world->transport(0)->isend(1, 3, message.data(), 4000);
  auto recv =
      world->transport(1)->irecv_reduce(0, 3, acc.data(), 4004, DType::kF32, ReduceOp::kSum);
  try {
    recv->wait(soon());
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "4000 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "4004 bytes")) << e.what();
  }
  EXPECT_THROW(send->wait(soon()), CommError);
  EXPECT_EQ(acc[0], 2.0f);
  EXPECT_THROW(world->transport(1)->irecv_reduce(0, 4, acc.data(), 6, DType::kF32, ReduceOp::kSum),
               ConfigError);
}

TEST(InprocTransportTest, SmallSendBufferIsFreeOnceTheSendCompletes) {
  // A small send is complete at post even with no receive posted: its bytes were copied, so the
  // buffer may be overwritten and the request destroyed before the receive arrives.
  auto world = InprocWorld::create(2);
  std::vector<std::int64_t> buffer(InprocWorld::kEagerBytes / sizeof(std::int64_t), 5);
  {
    auto send = world->transport(0)->isend(1, 9, buffer.data(), InprocWorld::kEagerBytes);
    EXPECT_TRUE(send->test());
  }
  std::fill(buffer.begin(), buffer.end(), -1);
  std::vector<std::int64_t> acc(buffer.size(), 2);
  world->transport(1)
      ->irecv_reduce(0, 9, acc.data(), InprocWorld::kEagerBytes, DType::kI64, ReduceOp::kSum)
      ->wait(soon());
  EXPECT_EQ(acc, std::vector<std::int64_t>(buffer.size(), 7));
}

TEST(InprocTransportTest, LargeTransferIsDoneByWhicheverOwnerWaitsFirst) {
  constexpr std::size_t kBytes = InprocWorld::kCopyOnMatchBytes * 4;
  auto world = InprocWorld::create(2);
  std::vector<std::uint8_t> out(kBytes);
  std::iota(out.begin(), out.end(), std::uint8_t{3});
  {
    // Only the sender waits: its wait moves the bytes, with the receiver's thread doing nothing.
    std::vector<std::uint8_t> in(kBytes, 0);
    auto recv = world->transport(1)->irecv(0, 1, in.data(), kBytes);
    auto send = world->transport(0)->isend(1, 1, out.data(), kBytes);
    send->wait(soon());
    EXPECT_TRUE(recv->test());
    EXPECT_EQ(in, out);
  }
  {
    // The receiver is asleep in wait when the send arrives: the match wakes it and it moves the
    // bytes itself while the sender's thread never waits.
    std::vector<std::uint8_t> in(kBytes, 0);
    std::unique_ptr<Request> send;
    std::thread late_sender([&] {
      std::this_thread::sleep_for(20ms);
      send = world->transport(0)->isend(1, 2, out.data(), kBytes);
    });
    world->transport(1)->irecv(0, 2, in.data(), kBytes)->wait(soon());
    late_sender.join();
    EXPECT_TRUE(send->test());
    EXPECT_EQ(in, out);
  }
  {
    // Destroying a matched receive finishes the transfer first (the buffer is still valid).
    std::vector<std::uint8_t> in(kBytes, 0);
    auto send = world->transport(0)->isend(1, 3, out.data(), kBytes);
    world->transport(1)->irecv(0, 3, in.data(), kBytes).reset();
    EXPECT_TRUE(send->test());
    EXPECT_EQ(in, out);
  }
}

TEST(InprocTransportTest, SymmetricExchangeWaitingOnSendsFirstCompletes) {
  // Both ranks post receive and send, then wait on the send first: neither may wait for the
  // other to start its receive wait.
  constexpr std::size_t kBytes = InprocWorld::kCopyOnMatchBytes * 2;
  auto world = InprocWorld::create(2);
  std::vector<std::vector<std::uint8_t>> out(2), in(2);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < 2; ++rank) {
    out[rank].assign(kBytes, static_cast<std::uint8_t>(rank + 1));
    in[rank].assign(kBytes, 0);
    threads.emplace_back([&, rank] {
      auto transport = world->transport(rank);
      auto recv = transport->irecv(1 - rank, 0, in[rank].data(), kBytes);
      auto send = transport->isend(1 - rank, 0, out[rank].data(), kBytes);
      send->wait(soon());
      recv->wait(soon());
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(in[0], out[1]);
  EXPECT_EQ(in[1], out[0]);
}

// Small messages (<= inproc::kFastBytes) go through the pair's fast box, larger ones through the
// lane; FIFO per (source, tag) must hold across the two paths, whichever side comes first.
std::vector<std::size_t> mixed_sizes() {
  return {4, 1000, 8, inproc::kFastBytes, inproc::kFastBytes + 1, 5000, 12, 70000, 0, 16};
}

std::vector<std::uint8_t> message(std::size_t k, std::size_t bytes) {
  std::vector<std::uint8_t> m(bytes);
  for (std::size_t i = 0; i < bytes; ++i) m[i] = static_cast<std::uint8_t>(k * 31 + i);
  return m;
}

TEST(InprocFastBoxTest, FifoPerTagAcrossSmallAndLargeMessagesEitherSideFirst) {
  const std::vector<std::size_t> sizes = mixed_sizes();
  for (const bool receive_first : {false, true}) {
    auto world = InprocWorld::create(2);
    auto a = world->transport(0);
    auto b = world->transport(1);
    std::vector<std::vector<std::uint8_t>> out, in;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      out.push_back(message(k, sizes[k]));
      in.emplace_back(70001, 0xEE);  // the largest message and a sentinel byte
    }
    std::vector<std::unique_ptr<Request>> receives, sends;
    auto post_receives = [&] {
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        receives.push_back(b->irecv(0, 5, in[k].data(), in[k].size()));
      }
    };
    if (receive_first) post_receives();
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      sends.push_back(a->isend(1, 5, out[k].data(), out[k].size()));
    }
    if (!receive_first) post_receives();
    for (auto& r : receives) r->wait(soon());
    for (auto& r : sends) r->wait(soon());
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      EXPECT_TRUE(std::equal(out[k].begin(), out[k].end(), in[k].begin()))
          << "message " << k << " (" << sizes[k] << " bytes), receive first " << receive_first;
      EXPECT_EQ(in[k][sizes[k]], 0xEE) << "message " << k << " overran its size";
    }
  }
}

TEST(InprocFastBoxTest, MoreSmallMessagesThanSlotsStayInOrder) {
  // Beyond inproc::kFastSlots unconsumed messages the rest take the lane, numbered in between.
  auto world = InprocWorld::create(2);
  auto a = world->transport(0);
  auto b = world->transport(1);
  constexpr int kCount = 3 * static_cast<int>(inproc::kFastSlots) + 1;
  for (int k = 0; k < kCount; ++k) {
    auto send = a->isend(1, 9, &k, sizeof(k));
    EXPECT_TRUE(send->test()) << k;  // small sends complete at once on either path
  }
  for (int k = 0; k < kCount; ++k) {
    int x = -1;
    b->irecv(0, 9, &x, sizeof(x))->wait(soon());
    EXPECT_EQ(x, k);
  }
}

TEST(InprocFastBoxTest, QueuedReceivesTakeFastMessagesInTheirOrder) {
  auto world = InprocWorld::create(2);
  auto a = world->transport(0);
  auto b = world->transport(1);
  std::vector<std::int64_t> got(4, -1);
  std::vector<std::unique_ptr<Request>> receives;
  for (auto& g : got) receives.push_back(b->irecv(0, 3, &g, sizeof(g)));
  // Another tag in between must not be taken by them.
  const std::int64_t other = 99;
  auto unrelated = a->isend(1, 4, &other, sizeof(other));
  for (std::int64_t k = 0; k < 4; ++k) a->isend(1, 3, &k, sizeof(k))->wait(soon());
  // Wait on the last receive first: whoever settles serves the oldest receive first.
  for (auto it = receives.rbegin(); it != receives.rend(); ++it) (*it)->wait(soon());
  EXPECT_EQ(got, (std::vector<std::int64_t>{0, 1, 2, 3}));
  std::int64_t x = 0;
  b->irecv(0, 4, &x, sizeof(x))->wait(soon());
  EXPECT_EQ(x, 99);
}

TEST(InprocFastBoxTest, ReduceReceivesAndSizeMismatchesOnTheFastPath) {
  auto world = InprocWorld::create(2);
  auto a = world->transport(0);
  auto b = world->transport(1);
  std::vector<float> acc = {1.0f, 2.0f};
  auto recv = b->irecv_reduce(0, 1, acc.data(), 2 * sizeof(float), DType::kF32, ReduceOp::kSum);
  const std::vector<float> add = {10.0f, 20.0f};
  a->isend(1, 1, add.data(), 2 * sizeof(float))->wait(soon());
  recv->wait(soon());
  EXPECT_EQ(acc, (std::vector<float>{11.0f, 22.0f}));
  // A 12-byte message for a reducing receive of 8: the receive fails naming both sizes.
  const std::vector<float> three = {1.0f, 1.0f, 1.0f};
  a->isend(1, 2, three.data(), 3 * sizeof(float))->wait(soon());
  try {
    b->irecv_reduce(0, 2, acc.data(), 2 * sizeof(float), DType::kF32, ReduceOp::kSum)->wait(soon());
    FAIL() << "expected CommError";
  } catch (const CommError& e) {
    EXPECT_TRUE(contains(e.what(), "12 bytes")) << e.what();
    EXPECT_TRUE(contains(e.what(), "exactly 8 bytes")) << e.what();
  }
  // And one too long for a plain receive.
  a->isend(1, 3, three.data(), 3 * sizeof(float))->wait(soon());
  float one = 0;
  EXPECT_THROW(b->irecv(0, 3, &one, sizeof(one))->wait(soon()), CommError);
}

TEST(InprocFastBoxTest, MessagesSentBeforeAnAbortAreStillDelivered) {
  for (const bool receive_first : {false, true}) {
    auto world = InprocWorld::create(2);
    auto a = world->transport(0);
    auto b = world->transport(1);
    int x = 0;
    std::unique_ptr<Request> recv;
    if (receive_first) recv = b->irecv(0, 1, &x, sizeof(x));
    const int v = 23;
    a->isend(1, 1, &v, sizeof(v))->wait(soon());
    world->abort(0, "rank 0 exited");
    if (!receive_first) recv = b->irecv(0, 1, &x, sizeof(x));
    recv->wait(soon());
    EXPECT_EQ(x, 23) << receive_first;
    // Nothing more will come: a later receive fails naming the rank.
    EXPECT_THROW(b->irecv(0, 1, &x, sizeof(x))->wait(soon()), CommError);
  }
}

TEST(InprocFastBoxTest, ConcurrentStreamsOfMixedSizesKeepTheirOrder) {
  // Two threads of rank 0 send interleaved small and large messages on their own tags to two
  // threads of rank 1; every stream arrives in order (run under TSan in CI).
  auto world = InprocWorld::create(2);
  const int rounds = 300;
  std::vector<int> errors(2, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto a = world->transport(0);
      for (int k = 0; k < rounds; ++k) {
        const std::size_t bytes = k % 3 == 2 ? 3000 : sizeof(int);
        std::vector<int> out(bytes / sizeof(int), k);
        a->isend(1, static_cast<std::uint64_t>(t), out.data(), bytes)->wait(soon());
      }
    });
    threads.emplace_back([&, t] {
      auto b = world->transport(1);
      for (int k = 0; k < rounds; ++k) {
        const std::size_t bytes = k % 3 == 2 ? 3000 : sizeof(int);
        std::vector<int> in(bytes / sizeof(int), -1);
        b->irecv(0, static_cast<std::uint64_t>(t), in.data(), bytes)->wait(soon());
        for (int x : in) errors[static_cast<std::size_t>(t)] += x != k;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(errors, (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace dtrain::comm
