// parallel::CommGroup, the nn::GroupComm that layers talk through: sums and gathers against
// closed forms for 1..4 ranks, and neighbour exchanges along a ring (each rank with its lower and
// higher neighbour, in increasing peer order) that deliver exactly the peer's buffer.
#include "dtrain/parallel/comm_group.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::parallel {
namespace {

TEST(CommGroup, SumsAndGathersOverTheRanks) {
  for (const int ranks : {1, 2, 3, 4}) {
    comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
      CommGroup group(comm);
      EXPECT_EQ(group.rank(), comm.rank());
      EXPECT_EQ(group.size(), ranks);
      const double r = comm.rank();
      std::vector<double> d{r, 2.0 * r + 1.0};
      group.allreduce_sum(d.data(), 2);
      const double sum_r = ranks * (ranks - 1) / 2.0;  // 0 + 1 + ... + (P-1)
      EXPECT_EQ(d, (std::vector<double>{sum_r, 2.0 * sum_r + ranks}));
      std::vector<float> f{static_cast<float>(r) + 0.5f};
      group.allreduce_sum(f.data(), 1);
      EXPECT_FLOAT_EQ(f[0], static_cast<float>(sum_r + 0.5 * ranks));
      const std::vector<float> mine{static_cast<float>(r), static_cast<float>(10.0 * r)};
      std::vector<float> all(2 * static_cast<std::size_t>(ranks));
      group.allgather(mine.data(), all.data(), 2);
      for (int k = 0; k < ranks; ++k) {
        EXPECT_EQ(all[2 * static_cast<std::size_t>(k)], static_cast<float>(k));
        EXPECT_EQ(all[2 * static_cast<std::size_t>(k) + 1], static_cast<float>(10 * k));
      }
    });
  }
}

TEST(CommGroup, NeighbourExchangeAlongARing) {
  for (const int ranks : {2, 3, 4, 5}) {
    comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
      CommGroup group(comm);
      const int me = comm.rank();
      // Rows of 3 values that name their sender, sent to each ring neighbour (lower peer first).
      std::vector<int> peers{(me + ranks - 1) % ranks, (me + 1) % ranks};
      std::sort(peers.begin(), peers.end());
      peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
      for (const int peer : peers) {
        const std::vector<float> send{static_cast<float>(me), static_cast<float>(peer), 7.0f};
        std::vector<float> recv(3, -1.0f);
        group.exchange(peer, send.data(), 3, recv.data(), 3);
        EXPECT_EQ(recv,
                  (std::vector<float>{static_cast<float>(peer), static_cast<float>(me), 7.0f}))
            << ranks << " ranks, rank " << me << " with " << peer;
      }
    });
  }
}

TEST(CommGroup, ExchangeWithItselfOrAMissingRankIsABug) {
  comm::spawn_ranks(2, [&](comm::Communicator& comm) {
    CommGroup group(comm);
    float value = 0.0f;
    EXPECT_THROW(group.exchange(comm.rank(), &value, 1, &value, 1), InternalError);
    EXPECT_THROW(group.exchange(2, &value, 1, &value, 1), InternalError);
  });
}

}  // namespace
}  // namespace dtrain::parallel
