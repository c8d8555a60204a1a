// random-k (randomk_codec.h): k distinct ascending indices that are a function of the seed alone
// (so two ranks with one seed keep the same elements and their payloads add), each element kept
// with probability k / n, and with scaling the mean of decode(encode(x)) over seeds is x.
#include "dtrain/compress/randomk_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "random_values.h"

namespace dtrain::compress {
namespace {

TEST(RandomkCodec, KeepsKDistinctIndicesChosenByTheSeed) {
  const RandomkCodec codec(KeepCount{0.0, 40}, /*scaled=*/false);
  for (std::int64_t n : {1, 7, 40, 1000, 1000003}) {
    const std::int64_t k = std::min<std::int64_t>(40, n);
    const auto indices = codec.indices(n, 5);
    ASSERT_EQ(static_cast<std::int64_t>(indices.size()), k);
    for (std::size_t j = 0; j < indices.size(); ++j) {
      ASSERT_GE(indices[j], 0);
      ASSERT_LT(indices[j], n);
      if (j > 0) {
        ASSERT_LT(indices[j - 1], indices[j]);
      }
    }
    EXPECT_EQ(codec.indices(n, 5), indices);
    if (k < n) {
      EXPECT_NE(codec.indices(n, 6), indices);
    }
    // The payload is x at those indices, and decode puts them back.
    const std::vector<float> x = testing::random_values(n, 9);
    std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
    codec.encode(x.data(), n, payload.data(), 5);
    std::vector<float> y(x.size(), 3.0f);
    codec.decode(payload.data(), n, y.data(), 5);
    std::vector<float> expected(x.size(), 0.0f);
    for (std::int64_t i : indices) expected[i] = x[i];
    ASSERT_EQ(y, expected);
  }
}

TEST(RandomkCodec, PayloadsOfOneSeedAddUp) {
  // What makes random-k summable: decode(encode(a) + encode(b)) = decode(encode(a + b)).
  const RandomkCodec codec(KeepCount{0.1, 0}, /*scaled=*/false);
  const std::int64_t n = 1001;
  std::vector<float> a = testing::random_values(n, 1), b = testing::random_values(n, 2);
  for (auto& v : a) v = std::round(v * 64.0f);  // integers: every sum below is exact
  for (auto& v : b) v = std::round(v * 64.0f);
  std::vector<float> sum(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
  const std::int64_t k = codec.wire_count(n);
  std::vector<float> pa(k), pb(k), psum(k);
  codec.encode(a.data(), n, reinterpret_cast<std::uint8_t*>(pa.data()), 7);
  codec.encode(b.data(), n, reinterpret_cast<std::uint8_t*>(pb.data()), 7);
  codec.encode(sum.data(), n, reinterpret_cast<std::uint8_t*>(psum.data()), 7);
  for (std::int64_t j = 0; j < k; ++j) EXPECT_EQ(pa[j] + pb[j], psum[j]) << j;
}

TEST(RandomkCodec, ScaledIsUnbiasedOverSeeds) {
  // Element i is n/k x_i with probability k/n, else 0: the mean of S draws has standard deviation
  // |x_i| sqrt((n/k - 1) / S); allow 6 of them. Fixed seeds: deterministic.
  constexpr int kSeeds = 20000;
  const std::int64_t n = 101;
  const RandomkCodec codec(KeepCount{0.0, 10}, /*scaled=*/true);
  const std::vector<float> x = testing::random_values(n, 14);
  std::vector<double> mean(x.size(), 0.0);
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  std::vector<float> y(x.size());
  for (int seed = 0; seed < kSeeds; ++seed) {
    codec.encode(x.data(), n, payload.data(), static_cast<std::uint64_t>(seed));
    codec.decode(payload.data(), n, y.data(), static_cast<std::uint64_t>(seed));
    for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / double{kSeeds};
  }
  const double spread = std::sqrt((double(n) / 10.0 - 1.0) / kSeeds);
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(mean[i], x[i], 6.0 * spread * std::fabs(x[i]) + 1e-6) << "element " << i;
  }
}

}  // namespace
}  // namespace dtrain::compress
