#include "dtrain/train/statistics.h"

#include <gtest/gtest.h>

namespace dtrain::train {
namespace {

TEST(Statistics, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({3.0, 1.0, 2.0}), 2.0);
  EXPECT_EQ(median({4.0, 1.0, 3.0, 2.0}), 2.5);
}

TEST(Statistics, NearestRankQuantileIsAMeasuredValue) {
  std::vector<double> values;
  for (int i = 100; i >= 1; --i) values.push_back(i);  // 1 .. 100, reversed
  EXPECT_EQ(nearest_rank_quantile(values, 0.5), 50.0);
  EXPECT_EQ(nearest_rank_quantile(values, 0.99), 99.0);
  EXPECT_EQ(nearest_rank_quantile(values, 1.0), 100.0);
  EXPECT_EQ(nearest_rank_quantile({7.0}, 0.99), 7.0);
  EXPECT_EQ(nearest_rank_quantile({}, 0.5), 0.0);
}

}  // namespace
}  // namespace dtrain::train
