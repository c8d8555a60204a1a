// The mpi transport's point-to-point semantics (transport/transport.h) between ranks 0 and 1 of
// the job: FIFO per (source, tag), tags never mix, sizes, deadlines, cancellation, wrong matches
// detected, concurrent posting from two threads. Other ranks only take part in creating transports.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <numeric>
#include <thread>
#include <vector>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/mpi/tag_map.h"
#include "dtrain/comm/transport/mpi/transport.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "mpi_test_env.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::contains;

constexpr std::uint64_t kP2P = mpi::kPointToPointBit;

Clock::time_point soon() { return Clock::now() + 30s; }

// Bytes whose value depends on (seed, position), so misplaced bytes are seen.
std::vector<std::uint8_t> pattern(std::size_t bytes, int seed) {
  std::vector<std::uint8_t> data(bytes);
  for (std::size_t i = 0; i < bytes; ++i) data[i] = static_cast<std::uint8_t>(i * 7 + seed * 13);
  return data;
}

// Sizes on both paths: inline (<= kInlineBytes) and split (header + payload message).
const std::vector<std::size_t> kSizes = {
    0, 1, 100, MpiTransport::kInlineBytes, MpiTransport::kInlineBytes + 1, 300001};

TEST(MpiTransportTest, MessagesOfEverySizeArriveWhicheverSidePostsFirst) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  EXPECT_EQ(transport->name(), "mpi");
  for (bool receiver_first : {true, false}) {
    for (std::size_t bytes : kSizes) {
      const auto sent = pattern(bytes, static_cast<int>(bytes % 97));
      if (transport->rank() == 0) {
        if (receiver_first) std::this_thread::sleep_for(2ms);
        transport->isend(1, kP2P | 5, sent.data(), bytes)->wait(soon());
      } else if (transport->rank() == 1) {
        if (!receiver_first) std::this_thread::sleep_for(2ms);
        std::vector<std::uint8_t> got(bytes, 0xee);
        transport->irecv(0, kP2P | 5, got.data(), bytes)->wait(soon());
        EXPECT_EQ(got, sent) << bytes << " bytes";
      }
    }
  }
}

TEST(MpiTransportTest, FifoPerTagAndTagsNeverMix) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  constexpr int kMessages = 6;
  if (transport->rank() == 0) {
    // A0 B0 A1 B1 ... alternating sizes on both paths.
    std::vector<std::vector<std::uint8_t>> a, b;
    std::vector<std::unique_ptr<Request>> requests;
    for (int i = 0; i < kMessages; ++i) {
      a.push_back(pattern(i % 2 == 0 ? 64 : 50000, i));
      b.push_back(pattern(i % 2 == 0 ? 50000 : 64, 100 + i));
    }
    for (int i = 0; i < kMessages; ++i) {
      requests.push_back(transport->isend(1, kP2P | 1, a[static_cast<std::size_t>(i)].data(),
                                          a[static_cast<std::size_t>(i)].size()));
      requests.push_back(transport->isend(1, kP2P | 2, b[static_cast<std::size_t>(i)].data(),
                                          b[static_cast<std::size_t>(i)].size()));
    }
    for (auto& request : requests) request->wait(soon());
  } else if (transport->rank() == 1) {
    // All of B first, then all of A: each tag's messages in their own order.
    for (std::uint64_t tag : {kP2P | 2, kP2P | 1}) {
      for (int i = 0; i < kMessages; ++i) {
        const bool big = (tag == (kP2P | 1)) == (i % 2 == 1);
        const int seed = tag == (kP2P | 1) ? i : 100 + i;
        std::vector<std::uint8_t> got(50000, 0);
        transport->irecv(0, tag, got.data(), got.size())->wait(soon());
        const auto expected = pattern(big ? 50000 : 64, seed);
        EXPECT_TRUE(std::equal(expected.begin(), expected.end(), got.begin()))
            << "tag " << (tag & 0xff) << " message " << i;
      }
    }
  }
}

TEST(MpiTransportTest, LargerReceiveBufferLeavesTheRestUntouched) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (std::size_t bytes : {std::size_t{10}, std::size_t{20000}}) {
    const auto sent = pattern(bytes, 3);
    if (transport->rank() == 0) {
      transport->isend(1, kP2P | 9, sent.data(), bytes)->wait(soon());
    } else if (transport->rank() == 1) {
      std::vector<std::uint8_t> got(bytes + 100, 0xab);
      transport->irecv(0, kP2P | 9, got.data(), got.size())->wait(soon());
      EXPECT_TRUE(std::equal(sent.begin(), sent.end(), got.begin()));
      for (std::size_t i = bytes; i < got.size(); ++i) ASSERT_EQ(got[i], 0xab) << i;
    }
  }
}

TEST(MpiTransportTest, ShortReceiveBufferIsCommErrorNamingBothSizes) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  for (std::size_t bytes : {std::size_t{100}, std::size_t{100000}}) {
    const auto sent = pattern(bytes, 1);
    if (transport->rank() == 0) {
      // The sender completes: MPI truncates the message at the receiver.
      EXPECT_NO_THROW(transport->isend(1, kP2P | 4, sent.data(), bytes)->wait(soon()));
    } else if (transport->rank() == 1) {
      std::vector<std::uint8_t> got(bytes / 2);
      try {
        transport->irecv(0, kP2P | 4, got.data(), got.size())->wait(soon());
        ADD_FAILURE() << "expected CommError for " << bytes << " bytes into " << got.size();
      } catch (const CommTimeoutError& e) {
        ADD_FAILURE() << "timeout instead of a size error: " << e.what();
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, std::to_string(bytes) + " bytes")) << what;
        EXPECT_TRUE(contains(what, std::to_string(bytes / 2) + " bytes")) << what;
        EXPECT_TRUE(contains(what, "process 0 -> process 1")) << what;
      }
    }
  }
  // The transport still works afterwards on the same tag.
  const auto sent = pattern(50000, 2);
  if (transport->rank() == 0) {
    transport->isend(1, kP2P | 4, sent.data(), sent.size())->wait(soon());
  } else if (transport->rank() == 1) {
    std::vector<std::uint8_t> got(sent.size());
    transport->irecv(0, kP2P | 4, got.data(), got.size())->wait(soon());
    EXPECT_EQ(got, sent);
  }
}

TEST(MpiTransportTest, DeadlineNamesRankPeerTagAndSizeAndCancelledReceiveTakesNothing) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  constexpr std::uint64_t kTag = kP2P | 0xabc;
  if (transport->rank() == 1) {
    std::vector<std::uint8_t> got(4096);
    {
      auto request = transport->irecv(0, kTag, got.data(), got.size());
      const auto start = Clock::now();
      try {
        request->wait(Clock::now() + 200ms);
        ADD_FAILURE() << "expected a timeout";
      } catch (const CommTimeoutError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "process 1: recv from process 0")) << what;
        EXPECT_TRUE(contains(what, "0x8000000000000abc")) << what;
        EXPECT_TRUE(contains(what, "4096 bytes")) << what;
      }
      EXPECT_LT(Clock::now() - start, 5s);
    }  // destroyed: cancelled
    // Tell rank 0 to send now; the message must reach this new receive.
    const std::uint8_t go = 1;
    transport->isend(0, kP2P | 1, &go, 1)->wait(soon());
    const auto sent = pattern(4096, 8);
    transport->irecv(0, kTag, got.data(), got.size())->wait(soon());
    EXPECT_EQ(got, sent);
  } else if (transport->rank() == 0) {
    std::uint8_t go = 0;
    transport->irecv(1, kP2P | 1, &go, 1)->wait(soon());
    const auto sent = pattern(4096, 8);
    transport->isend(1, kTag, sent.data(), sent.size())->wait(soon());
  }
}

TEST(MpiTransportTest, SendWithoutReceiverTimesOutNamingThePeer) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (transport->rank() == 0) {
    // Large: a rendezvous that needs the receiver, which never posts.
    const auto sent = pattern(1 << 20, 1);
    auto request = transport->isend(1, kP2P | 77, sent.data(), sent.size());
    try {
      request->wait(Clock::now() + 200ms);
      ADD_FAILURE() << "expected a timeout";
    } catch (const CommTimeoutError& e) {
      const std::string what = e.what();
      EXPECT_TRUE(contains(what, "process 0: send to process 1")) << what;
      EXPECT_TRUE(contains(what, "1048576 bytes")) << what;
    }
    // Let rank 1 drain it now, so the request completes instead of becoming an orphan.
    const std::uint8_t go = 1;
    transport->isend(1, kP2P | 78, &go, 1)->wait(soon());
    request->wait(soon());
  } else if (transport->rank() == 1) {
    std::uint8_t go = 0;
    transport->irecv(0, kP2P | 78, &go, 1)->wait(soon());
    std::vector<std::uint8_t> got(1 << 20);
    transport->irecv(0, kP2P | 77, got.data(), got.size())->wait(soon());
    EXPECT_EQ(got, pattern(1 << 20, 1));
  }
}

TEST(MpiTransportTest, MessageWithAnotherTagOnTheSameMpiTagIsDetected) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  // Two different point-to-point tags with the same MPI tag (31 bits in Open MPI).
  const std::uint64_t sent_tag = kP2P | 0;
  const std::uint64_t expected_tag = kP2P | (std::uint64_t{1} << 31) | 1;
  ASSERT_EQ(mpi::fold_tag(sent_tag, 31), mpi::fold_tag(expected_tag, 31));
  for (std::size_t bytes : {std::size_t{16}, std::size_t{40000}}) {
    if (transport->rank() == 0) {
      const auto sent = pattern(bytes, 5);
      auto request = transport->isend(1, sent_tag, sent.data(), bytes);
      if (bytes <= MpiTransport::kInlineBytes) request->wait(soon());
      // (a large one is never received: its payload stays unmatched; destroying the request
      // hands it to the transport)
    } else if (transport->rank() == 1) {
      std::vector<std::uint8_t> got(bytes, 0x11);
      try {
        transport->irecv(0, expected_tag, got.data(), bytes)->wait(soon());
        ADD_FAILURE() << "expected CommError";
      } catch (const CommError& e) {
        const std::string what = e.what();
        EXPECT_TRUE(contains(what, "matched a message with tag 0x8000000000000000")) << what;
        EXPECT_TRUE(contains(what, "0x8000000080000001")) << what;
      }
      EXPECT_EQ(got, std::vector<std::uint8_t>(bytes, 0x11)) << "no data may be delivered";
    }
  }
}

TEST(MpiTransportTest, TwoThreadsPerRankExchangeConcurrently) {
  auto transport = mpi_world_transport();
  if (transport->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  if (transport->rank() > 1) return;
  const int peer = 1 - transport->rank();
  auto exchange = [&](std::uint64_t tag, std::size_t bytes) {
    for (int i = 0; i < 50; ++i) {
      const auto mine = pattern(bytes, transport->rank() * 1000 + i);
      std::vector<std::uint8_t> got(bytes);
      auto receive = transport->irecv(peer, tag, got.data(), bytes);
      auto send = transport->isend(peer, tag, mine.data(), bytes);
      receive->wait(soon());
      send->wait(soon());
      ASSERT_EQ(got, pattern(bytes, peer * 1000 + i)) << "tag " << tag << " iteration " << i;
    }
  };
  std::thread other([&] { exchange(kP2P | 31, 20000); });
  exchange(kP2P | 32, 300);
  other.join();
}

// Payloads above max_piece_bytes travel as several MPI messages (1 GiB pieces in production; 10000
// bytes here): whole messages, short buffers and a Communicator's allreduce over such a transport.
TEST(MpiTransportTest, PayloadsSplitIntoPiecesArriveWholeAndShortBuffersStillFail) {
  auto transport = MpiTransport::create(MPI_COMM_WORLD, 10000);
  if (transport->size() >= 2 && transport->rank() <= 1) {
    const int peer = 1 - transport->rank();
    for (std::size_t bytes : {std::size_t{10000}, std::size_t{10001}, std::size_t{35001}}) {
      const auto mine = pattern(bytes, transport->rank() + static_cast<int>(bytes % 13));
      std::vector<std::uint8_t> got(bytes);
      auto receive = transport->irecv(peer, kP2P | 3, got.data(), bytes);
      auto send = transport->isend(peer, kP2P | 3, mine.data(), bytes);
      receive->wait(soon());
      send->wait(soon());
      EXPECT_EQ(got, pattern(bytes, peer + static_cast<int>(bytes % 13))) << bytes << " bytes";
    }
    // 35001 bytes (4 pieces) into 20000: a size error on the receiver, the sender completes.
    const auto sent = pattern(35001, 4);
    if (transport->rank() == 0) {
      transport->isend(1, kP2P | 6, sent.data(), sent.size())->wait(soon());
    } else {
      std::vector<std::uint8_t> got(20000, 0x5a);
      try {
        transport->irecv(0, kP2P | 6, got.data(), got.size())->wait(soon());
        ADD_FAILURE() << "expected CommError";
      } catch (const CommError& e) {
        EXPECT_TRUE(contains(e.what(), "35001 bytes")) << e.what();
        EXPECT_TRUE(contains(e.what(), "20000 bytes")) << e.what();
      }
      EXPECT_EQ(got, std::vector<std::uint8_t>(20000, 0x5a)) << "nothing written on a size error";
    }
  }
  Communicator comm(transport, testing::mpi_test_options());
  std::vector<float> data(50001, static_cast<float>(comm.rank() + 1));
  CollectiveOptions call;
  call.algorithm = "halving-doubling";  // whole halves: pieces of 10000 bytes
  comm.allreduce(data.data(), 50001, DType::kF32, ReduceOp::kSum, call);
  const auto p = static_cast<float>(comm.size());
  EXPECT_EQ(data, std::vector<float>(50001, p * (p + 1) / 2));
}

TEST(MpiTransportTest, BadPeerIsConfigError) {
  auto transport = mpi_world_transport();
  std::uint8_t byte = 0;
  EXPECT_THROW(transport->isend(transport->size(), kP2P, &byte, 1), ConfigError);
  EXPECT_THROW(transport->irecv(-1, kP2P, &byte, 1), ConfigError);
  EXPECT_THROW(MpiTransport::create(MPI_COMM_WORLD, MpiTransport::kInlineBytes), ConfigError);
}

}  // namespace
}  // namespace dtrain::comm
