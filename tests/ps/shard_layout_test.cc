#include "dtrain/ps/shard_layout.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::ps {
namespace {

TEST(ShardLayout, ShardsTileTheKeysAndDifferByAtMostOne) {
  for (const std::int64_t total : {0, 1, 2, 10, 101, 235146}) {
    for (const int servers : {1, 2, 3, 7}) {
      const ShardLayout layout(total, servers);
      std::int64_t next = 0;
      std::int64_t smallest = total;
      std::int64_t largest = 0;
      for (int s = 0; s < servers; ++s) {
        const KeyRange shard = layout.shard(s);
        EXPECT_EQ(shard.begin, next);
        next = shard.end;
        smallest = std::min(smallest, shard.size());
        largest = std::max(largest, shard.size());
      }
      EXPECT_EQ(next, total);
      EXPECT_LE(largest - smallest, 1) << total << " keys over " << servers;
    }
  }
}

TEST(ShardLayout, SplitCutsARangeAtShardBoundaries) {
  const ShardLayout layout(10, 3);  // [0, 3) [3, 6) [6, 10)
  const auto pieces = layout.split({2, 8});
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].server, 0);
  EXPECT_EQ(pieces[0].range, (KeyRange{2, 3}));
  EXPECT_EQ(pieces[1].range, (KeyRange{3, 6}));
  EXPECT_EQ(pieces[2].range, (KeyRange{6, 8}));
  EXPECT_EQ(layout.split({4, 5}).size(), 1u);
  EXPECT_TRUE(layout.split({5, 5}).empty());
  EXPECT_THROW(layout.split({8, 11}), ConfigError);
  EXPECT_THROW(ShardLayout(5, 0), ConfigError);
}

}  // namespace
}  // namespace dtrain::ps
