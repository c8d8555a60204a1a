// Communicator::shares_memory / exchange_addresses: thread ranks (inproc) and their
// sub-communicators read each other's memory between two barriers.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

CommOptions test_options() {
  CommOptions options;
  options.timeout = 20s;
  return options;
}

// Each rank writes its value, the barrier orders the writes before the reads, every rank reads
// every other rank's value through the exchanged address, and a second barrier keeps the values
// alive until all have read them.
void expect_every_rank_reads_every_other(Communicator& comm, int base) {
  ASSERT_TRUE(comm.shares_memory());
  auto mine = std::make_shared<std::vector<int>>(3, -1);
  const std::vector<const void*> addresses = comm.exchange_addresses(mine->data(), mine);
  ASSERT_EQ(static_cast<int>(addresses.size()), comm.size());
  EXPECT_EQ(addresses[static_cast<std::size_t>(comm.rank())], mine->data());
  *mine = {base + comm.rank(), 7, base - comm.rank()};  // same size: the address stays valid
  comm.barrier();
  for (int r = 0; r < comm.size(); ++r) {
    const int* theirs = static_cast<const int*>(addresses[static_cast<std::size_t>(r)]);
    EXPECT_EQ(theirs[0], base + r) << "rank " << comm.rank() << " reading rank " << r;
    EXPECT_EQ(theirs[2], base - r);
  }
  comm.barrier();
}

TEST(SharedMemory, ThreadRanksExchangeAddresses) {
  for (const int ranks : {1, 2, 3}) {
    spawn_ranks(
        ranks, [](Communicator& comm) { expect_every_rank_reads_every_other(comm, 100); },
        test_options());
  }
}

TEST(SharedMemory, SubCommunicatorsOfThreadRanksShareMemoryToo) {
  spawn_ranks(
      4,
      [](Communicator& comm) {
        auto sub = comm.split(comm.rank() % 2, comm.rank());
        ASSERT_NE(sub, nullptr);
        expect_every_rank_reads_every_other(*sub, 1000 * (comm.rank() % 2));
      },
      test_options());
}

// A rank that fails after sharing its memory unwinds and drops its own reference while the
// others, already past the barrier, may still read that memory: the world keeps the allocation
// until every rank has ended (under ASan a freed buffer would fail this test), then frees it.
TEST(SharedMemory, SharedStorageOutlivesTheRankThatFailed) {
  std::weak_ptr<const void> watched;
  const auto run = [&] {
    spawn_ranks(
        2,
        [&](Communicator& comm) {
          auto mine = std::make_shared<std::vector<float>>(1 << 18, 0.0f);  // 1 MiB
          const std::vector<const void*> addresses = comm.exchange_addresses(mine->data(), mine);
          (*mine)[12345] = 3.5f + static_cast<float>(comm.rank());
          if (comm.rank() == 1) watched = mine;
          comm.barrier();
          if (comm.rank() == 1) {
            mine.reset();
            throw std::runtime_error("rank 1 fails after the barrier");
          }
          // The world aborts rank 1 only after its thread has unwound, so the next barrier
          // fails after rank 1 dropped its reference; then read what it shared.
          EXPECT_ANY_THROW(comm.barrier());
          const float* theirs = static_cast<const float*>(addresses[1]);
          EXPECT_EQ(theirs[12345], 4.5f);
          EXPECT_FALSE(watched.expired());
        },
        test_options());
  };
  EXPECT_THROW(run(), CommError);  // spawn_ranks rethrows rank 1's error, prefixed
  EXPECT_TRUE(watched.expired()) << "the world frees what it kept once spawn_ranks returns";
}

}  // namespace
}  // namespace dtrain::comm
