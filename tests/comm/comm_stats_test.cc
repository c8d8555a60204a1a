// Bytes and messages counted by the communicator against the seeds' formulas (seed 003).
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "dtrain/comm/algorithms/binary_trees.h"
#include "dtrain/comm/algorithms/blocks.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/stats.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

struct Measured {
  std::vector<OpStats> per_rank;
  std::vector<OpStats> headers;
};

// Runs one f32 sum allreduce of `count` elements with `algorithm` on P ranks; returns each rank's
// "allreduce" counters.
Measured measure(const std::string& algorithm, int ranks, std::int64_t count,
                 bool check_headers = true, int local_size = 0) {
  Measured measured;
  measured.per_rank.resize(static_cast<std::size_t>(ranks));
  measured.headers.resize(static_cast<std::size_t>(ranks));
  CommOptions options;
  options.timeout = 20s;
  options.segment_bytes = 4096;
  options.check_headers = check_headers;
  options.local_size = local_size;
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        std::vector<float> data(static_cast<std::size_t>(count), 1.0f);
        CollectiveOptions call;
        call.algorithm = algorithm;
        comm.allreduce(data.data(), count, DType::kF32, ReduceOp::kSum, call);
        EXPECT_EQ(data,
                  std::vector<float>(static_cast<std::size_t>(count), static_cast<float>(ranks)));
        measured.per_rank[static_cast<std::size_t>(comm.rank())] = comm.stats().get("allreduce");
        measured.headers[static_cast<std::size_t>(comm.rank())] = comm.stats().get("header_check");
      },
      options);
  return measured;
}

TEST(CommStatsTest, RingSendsTwoTimesPMinusOneOverPTimesN) {
  for (int ranks : {2, 3, 4, 5, 8}) {
    for (std::int64_t count : {std::int64_t{4000}, std::int64_t{10007}, std::int64_t{3}}) {
      const Measured m = measure("ring", ranks, count);
      for (int r = 0; r < ranks; ++r) {
        // Exact: 4 x (2 count - |block r| - |block (r + 1) mod P|) bytes, blocks as in blocks.h;
        // = 2(P - 1)/P x N when P divides count.
        const std::int64_t expect = 4 * (2 * count - block_size(count, ranks, r) -
                                         block_size(count, ranks, (r + 1) % ranks));
        const OpStats& s = m.per_rank[static_cast<std::size_t>(r)];
        EXPECT_EQ(s.bytes_sent, expect) << "P=" << ranks << " count " << count << " rank " << r;
        EXPECT_EQ(s.bytes_received,
                  4 * (2 * count - block_size(count, ranks, (r + ranks - 1) % ranks) -
                       block_size(count, ranks, r)))
            << "P=" << ranks << " count " << count << " rank " << r;
        EXPECT_EQ(s.calls, 1);
        if (count % ranks == 0) {
          EXPECT_EQ(s.bytes_sent, 2 * (ranks - 1) * 4 * count / ranks);
        }
      }
    }
  }
}

TEST(CommStatsTest, RingSegmentsMessagesBySegmentBytes) {
  // P = 2, 4096 f32 = 16 KiB: each step moves one 8 KiB block in 2 segments of 4 KiB; 2 steps.
  const Measured m = measure("ring", 2, 4096);
  for (const OpStats& s : m.per_rank) {
    EXPECT_EQ(s.messages_sent, 4);
    EXPECT_EQ(s.messages_received, 4);
  }
}

TEST(CommStatsTest, ParameterServerMovesPMinusOneTimesNThroughTheMaster) {
  for (int ranks : {2, 3, 5}) {
    const std::int64_t count = 1001;
    const std::int64_t bytes = 4 * count;
    const Measured m = measure("parameter-server", ranks, count);
    EXPECT_EQ(m.per_rank[0].bytes_received, (ranks - 1) * bytes);
    EXPECT_EQ(m.per_rank[0].bytes_sent, (ranks - 1) * bytes);
    for (int r = 1; r < ranks; ++r) {
      EXPECT_EQ(m.per_rank[static_cast<std::size_t>(r)].bytes_sent, bytes);
      EXPECT_EQ(m.per_rank[static_cast<std::size_t>(r)].bytes_received, bytes);
    }
  }
}

TEST(CommStatsTest, ShardedParameterServerSendsTwoTimesPMinusOneOverPTimesN) {
  for (int ranks : {2, 3, 4, 7}) {
    for (std::int64_t count : {std::int64_t{7 * 400}, std::int64_t{1003}}) {
      const Measured m = measure("sharded-ps", ranks, count);
      for (int r = 0; r < ranks; ++r) {
        // Exact: 4 x ((count - |block r|) + (P - 1) |block r|) bytes each way.
        const std::int64_t own = block_size(count, ranks, r);
        const std::int64_t expect = 4 * ((count - own) + (ranks - 1) * own);
        EXPECT_EQ(m.per_rank[static_cast<std::size_t>(r)].bytes_sent, expect) << "P=" << ranks;
        EXPECT_EQ(m.per_rank[static_cast<std::size_t>(r)].bytes_received, expect) << "P=" << ranks;
        if (count % ranks == 0) {
          EXPECT_EQ(m.per_rank[static_cast<std::size_t>(r)].bytes_sent,
                    2 * (ranks - 1) * 4 * count / ranks);
        }
      }
    }
  }
}

TEST(CommStatsTest, TreeAndHalvingDoublingMoveTheirTextbookVolumes) {
  // Tree, P = 4: rank 0 receives 2 buffers and sends 2; rank 3 sends 1 and receives 1.
  const Measured tree = measure("tree", 4, 100);
  EXPECT_EQ(tree.per_rank[0].bytes_received, 2 * 400);
  EXPECT_EQ(tree.per_rank[0].bytes_sent, 2 * 400);
  EXPECT_EQ(tree.per_rank[3].bytes_sent, 400);
  EXPECT_EQ(tree.per_rank[3].bytes_received, 400);
  // Halving-doubling, P = 4 (a power of two), 1000 f32: 2 (P - 1)/P N = 6000 bytes per rank.
  const Measured hd = measure("halving-doubling", 4, 1000);
  for (const OpStats& s : hd.per_rank) EXPECT_EQ(s.bytes_sent, 6000);
  // P = 3: rank 0 folds into rank 1 (N out, N back), ranks 1 and 2 exchange halves (N each way).
  const Measured hd3 = measure("halving-doubling", 3, 1000);
  EXPECT_EQ(hd3.per_rank[0].bytes_sent, 4000);
  EXPECT_EQ(hd3.per_rank[0].bytes_received, 4000);
  EXPECT_EQ(hd3.per_rank[1].bytes_sent, 4000 + 4000);
  EXPECT_EQ(hd3.per_rank[2].bytes_sent, 4000);
}

TEST(CommStatsTest, DoubleBinaryTreeMovesEachHalfOnceUpAndOnceDownItsTree) {
  for (int ranks : {2, 3, 4, 5, 7, 8, 16}) {
    for (std::int64_t count : {std::int64_t{1}, std::int64_t{4001}, std::int64_t{10000}}) {
      const Measured m = measure("double-binary-tree", ranks, count);
      const std::int64_t half[2] = {count / 2, count - count / 2};
      std::int64_t total = 0;
      for (int r = 0; r < ranks; ++r) {
        // Exact: 4 x sum over trees of |half| x (children + 1 unless the root), each way.
        std::int64_t expect = 0;
        for (int t = 0; t < 2; ++t) {
          const TreeLinks links = double_binary_tree_links(ranks, r, t);
          expect += 4 * half[t] * (links.child_count() + (links.parent >= 0 ? 1 : 0));
        }
        const OpStats& s = m.per_rank[static_cast<std::size_t>(r)];
        EXPECT_EQ(s.bytes_sent, expect) << "P=" << ranks << " count " << count << " rank " << r;
        EXPECT_EQ(s.bytes_received, expect) << "P=" << ranks << " count " << count;
        // Never more than 2 N per rank (inner node of one tree, leaf of the other), N at P = 2.
        EXPECT_LE(s.bytes_sent, (ranks == 2 ? 1 : 2) * 4 * count + 8) << "P=" << ranks;
        total += s.bytes_sent;
      }
      // Each tree has P - 1 edges; each edge carries its half up once and down once: 2(P-1) N.
      EXPECT_EQ(total, 2 * (ranks - 1) * 4 * count) << "P=" << ranks << " count " << count;
    }
  }
}

TEST(CommStatsTest, HierarchicalSendsOneBufferPerGroupAcrossGroups) {
  // P = 6 in groups of 2: leaders 0, 2, 4. A non-leader sends N up and receives N back; a leader
  // receives N from its member, runs ring among 3 leaders, sends N to its member.
  const std::int64_t count = 3000;
  const std::int64_t n = 4 * count;
  const Measured m = measure("hierarchical", 6, count, true, 2);
  for (int r = 0; r < 6; ++r) {
    const OpStats& s = m.per_rank[static_cast<std::size_t>(r)];
    if (r % 2 == 1) {
      EXPECT_EQ(s.bytes_sent, n) << "rank " << r;
      EXPECT_EQ(s.bytes_received, n) << "rank " << r;
    } else {
      const int leader = r / 2;
      const std::int64_t ring =
          4 * (2 * count - block_size(count, 3, leader) - block_size(count, 3, (leader + 1) % 3));
      EXPECT_EQ(s.bytes_sent, ring + n) << "rank " << r;
      EXPECT_EQ(s.bytes_received, ring + n) << "rank " << r;
    }
  }
  // One group (local_size 0): a binomial reduce and broadcast, the tree's volumes.
  const Measured one = measure("hierarchical", 4, 100);
  const Measured tree = measure("tree", 4, 100);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(one.per_rank[static_cast<std::size_t>(r)].bytes_sent,
              tree.per_rank[static_cast<std::size_t>(r)].bytes_sent);
  }
}

TEST(CommStatsTest, ScatterGatherAlltoallMoveTheirBlocks) {
  const int ranks = 5;
  const std::int64_t count = 100;  // per block
  std::vector<OpStats> scatter(ranks), gather(ranks), alltoall(ranks);
  CommOptions options;
  options.timeout = 20s;
  spawn_ranks(
      ranks,
      [&](Communicator& comm) {
        std::vector<float> big(static_cast<std::size_t>(ranks * count), 1.0f);
        std::vector<float> small(static_cast<std::size_t>(count), 1.0f);
        comm.scatter(big.data(), small.data(), count, DType::kF32, 2);
        comm.gather(small.data(), big.data(), count, DType::kF32, 2);
        std::vector<float> out(big.size());
        comm.alltoall(big.data(), out.data(), count, DType::kF32);
        const auto r = static_cast<std::size_t>(comm.rank());
        scatter[r] = comm.stats().get("scatter");
        gather[r] = comm.stats().get("gather");
        alltoall[r] = comm.stats().get("alltoall");
      },
      options);
  std::int64_t scatter_received = 0;
  for (int r = 0; r < ranks; ++r) {
    const auto i = static_cast<std::size_t>(r);
    // Alltoall: exactly P - 1 blocks each way.
    EXPECT_EQ(alltoall[i].bytes_sent, (ranks - 1) * 4 * count);
    EXPECT_EQ(alltoall[i].bytes_received, (ranks - 1) * 4 * count);
    scatter_received += scatter[i].bytes_received;
    EXPECT_EQ(scatter[i].bytes_sent, gather[i].bytes_received) << "mirror images, rank " << r;
  }
  // The root sends every block but its own, in ceil(log2 5) = 3 messages (relative ranks 4, 2
  // with 3 below it, and 1); each rank receives its subtree: 1 + 2 + 1 + 1 = 5 blocks in all.
  EXPECT_EQ(scatter[2].bytes_sent, 4 * 4 * count);
  EXPECT_EQ(scatter[2].messages_sent, 3);
  EXPECT_EQ(gather[2].bytes_received, 4 * 4 * count);
  EXPECT_EQ(scatter_received, 4 * count * 5);
}

TEST(CommStatsTest, HeaderCheckIsCountedApartAndCanBeTurnedOff) {
  const Measured on = measure("ring", 4, 100);
  EXPECT_EQ(on.headers[0].messages_received, 3);  // one header from each other rank
  EXPECT_EQ(on.headers[0].messages_sent, 3);      // one verdict to each
  EXPECT_EQ(on.headers[2].messages_sent, 1);
  EXPECT_EQ(on.headers[2].messages_received, 1);
  const Measured off = measure("ring", 4, 100, false);
  EXPECT_EQ(off.headers[0].calls, 0);
  EXPECT_EQ(off.per_rank[0].bytes_sent, on.per_rank[0].bytes_sent);
}

TEST(CommStatsTest, AccumulatesAndResets) {
  CommStats stats;
  OpStats delta;
  delta.calls = 1;
  delta.bytes_sent = 10;
  delta.seconds = 0.5;
  stats.record("allreduce", delta);
  stats.record("allreduce", delta);
  EXPECT_EQ(stats.get("allreduce").calls, 2);
  EXPECT_EQ(stats.get("allreduce").bytes_sent, 20);
  EXPECT_DOUBLE_EQ(stats.get("allreduce").seconds, 1.0);
  EXPECT_EQ(stats.get("broadcast").calls, 0);
  EXPECT_EQ(stats.snapshot().size(), 1u);
  stats.reset();
  EXPECT_EQ(stats.get("allreduce").calls, 0);
}

}  // namespace
}  // namespace dtrain::comm
