// ShuffledSampler: epoch orders are permutations, a pure function of (seed, epoch), different
// across epochs and seeds, unbiased; rank shards are contiguous, equal, disjoint, and cover the
// epoch's order except its last size % ranks indices (dropped).
#include "dtrain/data/shuffled_sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <set>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

bool is_permutation_of_range(std::vector<std::int64_t> order, std::int64_t size) {
  if (static_cast<std::int64_t>(order.size()) != size) return false;
  std::sort(order.begin(), order.end());
  for (std::int64_t i = 0; i < size; ++i) {
    if (order[static_cast<std::size_t>(i)] != i) return false;
  }
  return true;
}

std::vector<std::int64_t> iota(std::int64_t size) {
  std::vector<std::int64_t> v(static_cast<std::size_t>(size));
  std::iota(v.begin(), v.end(), std::int64_t{0});
  return v;
}

TEST(ShuffledSampler, EpochOrdersArePermutations) {
  for (std::int64_t size : {0, 1, 2, 7, 100, 1001}) {
    const ShuffledSampler sampler(size, 42);
    EXPECT_EQ(sampler.size(), size);
    for (std::int64_t epoch = 0; epoch < 5; ++epoch) {
      EXPECT_TRUE(is_permutation_of_range(sampler.epoch_order(epoch), size))
          << "size " << size << " epoch " << epoch;
    }
  }
}

TEST(ShuffledSampler, PureFunctionOfSeedAndEpoch) {
  const ShuffledSampler a(1000, 7);
  const ShuffledSampler b(1000, 7);
  for (std::int64_t epoch : {0, 1, 5, 1000000}) {
    EXPECT_EQ(a.epoch_order(epoch), b.epoch_order(epoch));
    // Asking again, or in another order, gives the same permutation.
    EXPECT_EQ(a.epoch_order(epoch), a.epoch_order(epoch));
  }
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
  EXPECT_NE(a.epoch_order(1), a.epoch_order(2));
  EXPECT_NE(a.epoch_order(0), ShuffledSampler(1000, 8).epoch_order(0));
  // A shuffle of 1000 items leaves them in order with probability 1/1000!.
  EXPECT_NE(a.epoch_order(0), iota(1000));
}

TEST(ShuffledSampler, NoShuffleIsTheIdentity) {
  const ShuffledSampler sampler(13, 99, /*shuffle=*/false);
  EXPECT_EQ(sampler.epoch_order(0), iota(13));
  EXPECT_EQ(sampler.epoch_order(4), iota(13));
  EXPECT_EQ(sampler.rank_order(3, 1, 3), (std::vector<std::int64_t>{4, 5, 6, 7}));
}

TEST(ShuffledSampler, FirstPositionIsUniform) {
  // Over 4000 epochs each of 4 items comes first about 1000 times (sd 27); a biased shuffle (such
  // as swapping with any position instead of [0, i]) misses by far more than 150.
  const ShuffledSampler sampler(4, 3);
  std::vector<int> first(4, 0);
  for (std::int64_t epoch = 0; epoch < 4000; ++epoch) {
    ++first[static_cast<std::size_t>(sampler.epoch_order(epoch)[0])];
  }
  for (int count : first) EXPECT_NEAR(count, 1000, 150);
}

TEST(ShuffledSampler, RankShardsAreDisjointEqualAndDropTheRemainder) {
  for (std::int64_t size : {0, 1, 5, 7, 100, 1001}) {
    for (int ranks : {1, 2, 3, 4, 7, 8}) {
      const ShuffledSampler sampler(size, 2024);
      const std::int64_t epoch = size + ranks;
      const std::vector<std::int64_t> order = sampler.epoch_order(epoch);
      const std::int64_t shard = size / ranks;
      EXPECT_EQ(sampler.rank_size(ranks), shard);
      std::vector<std::int64_t> joined;
      std::set<std::int64_t> seen;
      for (int rank = 0; rank < ranks; ++rank) {
        const std::vector<std::int64_t> mine = sampler.rank_order(epoch, rank, ranks);
        ASSERT_EQ(static_cast<std::int64_t>(mine.size()), shard) << size << " / " << ranks;
        for (std::int64_t index : mine) {
          EXPECT_TRUE(seen.insert(index).second) << "index " << index << " on two ranks";
        }
        joined.insert(joined.end(), mine.begin(), mine.end());
      }
      // Rank shards in rank order are the epoch's order without its last size % ranks indices.
      EXPECT_EQ(joined, std::vector<std::int64_t>(order.begin(), order.begin() + shard * ranks))
          << size << " / " << ranks;
    }
  }
}

TEST(ShuffledSampler, DroppedSamplesChangeAcrossEpochs) {
  // 10 samples on 3 ranks drop one per epoch; over 50 epochs every sample sits out at least once
  // with probability 1 - 10 * 0.9^50 = 0.995; this seed is one of those.
  const ShuffledSampler sampler(10, 1);
  std::set<std::int64_t> dropped;
  for (std::int64_t epoch = 0; epoch < 50; ++epoch)
    dropped.insert(sampler.epoch_order(epoch).back());
  EXPECT_EQ(dropped.size(), 10u);
}

TEST(ShuffledSampler, BadArguments) {
  EXPECT_THROW(ShuffledSampler(-1, 0), ConfigError);
  const ShuffledSampler sampler(10, 0);
  EXPECT_THROW(sampler.rank_order(0, 3, 3), InternalError);
  EXPECT_THROW(sampler.rank_order(0, -1, 3), InternalError);
  EXPECT_THROW(sampler.rank_order(0, 0, 0), InternalError);
  EXPECT_THROW(sampler.epoch_order(-1), InternalError);
}

}  // namespace
}  // namespace dtrain::data
