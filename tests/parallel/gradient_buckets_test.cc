// Tensor fusion: buckets in reverse parameter order, within fusion_bytes, covering the gradient
// buffer exactly once, each ready after the lowest layer it holds.
#include "dtrain/parallel/gradient_buckets.h"

#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::parallel {
namespace {

// Three layers: fc1 (w 100, b 10), fc2 (w 50, b 5), fc3 (w 20, b 2), f32.
struct Table {
  std::vector<nn::ParamEntry> entries;
  std::vector<std::size_t> layers;
};

Table three_layers() {
  Table t;
  const std::int64_t sizes[] = {100, 10, 50, 5, 20, 2};
  const char* names[] = {"fc1.weight", "fc1.bias",   "fc2.weight",
                         "fc2.bias",   "fc3.weight", "fc3.bias"};
  std::int64_t offset = 0;
  for (int i = 0; i < 6; ++i) {
    t.entries.push_back({names[i], offset, {sizes[i]}, sizes[i], i % 2 == 0});
    t.layers.push_back(static_cast<std::size_t>(i / 2));
    offset += sizes[i];
  }
  return t;
}

void expect_tiles_buffer(const std::vector<GradientBucket>& buckets, std::int64_t total) {
  // Launch order is reverse parameter order: each bucket ends where the next one begins.
  std::int64_t end = total;
  for (const auto& b : buckets) {
    EXPECT_EQ(b.offset + b.count, end) << b.name;
    end = b.offset;
  }
  EXPECT_EQ(end, 0);
}

TEST(GradientBuckets, ZeroFusionGivesOneBucketPerTensorInReverseOrder) {
  const Table t = three_layers();
  const auto buckets = make_gradient_buckets(t.entries, t.layers, 0);
  ASSERT_EQ(buckets.size(), 6u);
  EXPECT_EQ(buckets[0].name, "fc3.bias");
  EXPECT_EQ(buckets[5].name, "fc1.weight");
  EXPECT_EQ(buckets[0].ready_after_layer, 2u);
  EXPECT_EQ(buckets[5].ready_after_layer, 0u);
  expect_tiles_buffer(buckets, 187);
}

TEST(GradientBuckets, LargeFusionGivesOneBucket) {
  const Table t = three_layers();
  const auto buckets = make_gradient_buckets(t.entries, t.layers, 1 << 20);
  ASSERT_EQ(buckets.size(), 1u);
  EXPECT_EQ(buckets[0].offset, 0);
  EXPECT_EQ(buckets[0].count, 187);
  EXPECT_EQ(buckets[0].ready_after_layer, 0u);
  EXPECT_EQ(buckets[0].name, "fc3.bias..fc1.weight");
}

TEST(GradientBuckets, BucketsStayWithinTheLimitUnlessOneTensorIsLarger) {
  const Table t = three_layers();
  // 240 bytes = 60 floats: fc3 (22) + fc2.bias (5) = 27 fit, fc2.weight (50) would make 77.
  const auto buckets = make_gradient_buckets(t.entries, t.layers, 240);
  ASSERT_EQ(buckets.size(), 3u);
  EXPECT_EQ(buckets[0].count, 27);  // fc3.bias, fc3.weight, fc2.bias
  EXPECT_EQ(buckets[0].ready_after_layer, 1u);
  EXPECT_EQ(buckets[1].count, 60);   // fc2.weight + fc1.bias
  EXPECT_EQ(buckets[2].count, 100);  // fc1.weight alone, larger than the limit
  expect_tiles_buffer(buckets, 187);
  for (const auto& b : buckets) {
    if (b.end_entry - b.first_entry > 1) {
      EXPECT_LE(b.count * 4, 240) << b.name;
    }
  }
}

TEST(GradientBuckets, RejectsNegativeFusionAndMismatchedTables) {
  Table t = three_layers();
  EXPECT_THROW(make_gradient_buckets(t.entries, t.layers, -1), ConfigError);
  t.layers.pop_back();
  EXPECT_THROW(make_gradient_buckets(t.entries, t.layers, 0), InternalError);
}

TEST(GradientBuckets, EmptyModelHasNoBuckets) {
  EXPECT_TRUE(make_gradient_buckets({}, {}, 1024).empty());
}

}  // namespace
}  // namespace dtrain::parallel
