// Communicator::shares_memory / exchange_addresses: thread ranks (inproc) and their
// sub-communicators read each other's memory between two barriers.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <vector>

#include "dtrain/base/error.h"
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
  std::vector<int> mine(3, -1);
  const std::vector<const void*> addresses = comm.exchange_addresses(mine.data());
  ASSERT_EQ(static_cast<int>(addresses.size()), comm.size());
  EXPECT_EQ(addresses[static_cast<std::size_t>(comm.rank())], mine.data());
  mine = {base + comm.rank(), 7, base - comm.rank()};  // same size: the address stays valid
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

}  // namespace
}  // namespace dtrain::comm
