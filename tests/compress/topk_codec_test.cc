// top-k (topk_codec.h): the payload holds exactly the k largest |x| (ties to the lower index), in
// ascending index order, found here by a full sort; decode puts them back and zeros the rest. The
// sampled threshold must not change the answer, also when the sample misleads.
#include "dtrain/compress/topk_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "random_values.h"

namespace dtrain::compress {
namespace {

// The reference: indices sorted by (|x| descending, index ascending), the first k, ascending.
std::vector<std::int32_t> reference_topk(const std::vector<float>& x, std::int64_t k) {
  std::vector<std::int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return std::fabs(x[a]) > std::fabs(x[b]);
  });
  order.resize(static_cast<std::size_t>(k));
  std::sort(order.begin(), order.end());
  return order;
}

void expect_topk(const std::vector<float>& x, const TopkCodec& codec, std::int64_t k) {
  const auto n = static_cast<std::int64_t>(x.size());
  ASSERT_EQ(codec.encoded_bytes(n), static_cast<std::size_t>(8 * k));
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> values(static_cast<std::size_t>(k));
  std::vector<std::int32_t> indices(static_cast<std::size_t>(k));
  std::memcpy(values.data(), payload.data(), 4 * static_cast<std::size_t>(k));
  std::memcpy(indices.data(), payload.data() + 4 * k, 4 * static_cast<std::size_t>(k));
  ASSERT_EQ(indices, reference_topk(x, k)) << "n " << n << " k " << k;
  for (std::int64_t j = 0; j < k; ++j) ASSERT_EQ(values[j], x[indices[j]]);
  std::vector<float> y(x.size(), 5.0f);
  codec.decode(payload.data(), n, y.data(), 0);
  std::vector<float> expected(x.size(), 0.0f);
  for (std::int32_t i : indices) expected[i] = x[i];
  ASSERT_EQ(y, expected);
}

TEST(TopkCodec, KeepsExactlyTheKLargestMagnitudes) {
  for (std::int64_t n : {1, 7, 1000, 70001, 1000003}) {
    const std::vector<float> x = testing::random_values(n, 31);
    for (double ratio : {0.001, 0.01, 0.3, 1.0}) {
      const KeepCount keep{ratio, 0};
      expect_topk(x, TopkCodec(keep), keep.of(n));
    }
    expect_topk(x, TopkCodec(KeepCount{0.0, 5}), std::min<std::int64_t>(5, n));
  }
}

TEST(TopkCodec, TiesGoToTheLowerIndex) {
  // Magnitudes from 8 values only: most of the k-th largest are tied.
  std::vector<float> x = testing::random_values(100003, 4);
  for (float& v : x) v = std::round(v * 4.0f) / 4.0f;
  for (double ratio : {0.01, 0.2, 0.5})
    expect_topk(x, TopkCodec(KeepCount{ratio, 0}), std::llround(ratio * 100003));
}

TEST(TopkCodec, ASampleThatMisleadsStillGivesTheTopK) {
  // The sample reads every (n / 4096)-th element: make those the largest, so that the sampled
  // threshold admits only them (4096 < k candidates) and the pass over every element must run.
  const std::int64_t n = 1 << 20;
  const std::int64_t stride = n / 4096;
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = i % stride == 0 ? 1.0f : 0.001f * static_cast<float>(i % 997);
  }
  expect_topk(x, TopkCodec(KeepCount{0.0, 20000}), 20000);
}

TEST(TopkCodec, NanCountsAsTheLargest) {
  std::vector<float> x = testing::random_values(50, 1);
  x[17] = std::nanf("");
  TopkCodec codec(KeepCount{0.0, 1});
  std::vector<std::uint8_t> payload(codec.encoded_bytes(50));
  codec.encode(x.data(), 50, payload.data(), 0);
  std::int32_t index;
  std::memcpy(&index, &payload.at(4), 4);
  EXPECT_EQ(index, 17);
}

}  // namespace
}  // namespace dtrain::compress
