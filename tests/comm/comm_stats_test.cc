// Bytes and messages counted by the communicator against the seeds' formulas (seed 003).
#include <gtest/gtest.h>

#include <mutex>
#include <vector>

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
                 bool check_headers = true) {
  Measured measured;
  measured.per_rank.resize(static_cast<std::size_t>(ranks));
  measured.headers.resize(static_cast<std::size_t>(ranks));
  CommOptions options;
  options.timeout = 20s;
  options.segment_bytes = 4096;
  options.check_headers = check_headers;
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
