// QSGD (qsgd_codec.h): every decoded value is one of the two levels around s |x_i| / norm, with
// the norm and the sign kept; over many seeds the mean of decode(encode(x)) is x (unbiased) within
// a bound from the codec's variance, (norm / s)^2 / 4 per element.
#include "dtrain/compress/qsgd_codec.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "random_values.h"

namespace dtrain::compress {
namespace {

double norm_of(const std::vector<float>& x) {
  double s = 0.0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

TEST(QsgdCodec, DecodesToANeighbouringLevelWithTheSign) {
  for (int bits : {2, 3, 8, 9, 16}) {
    QsgdCodec codec(bits);
    const int s = (1 << (bits - 1)) - 1;
    EXPECT_EQ(codec.levels(), s);
    for (std::int64_t n : {1, 7, 1000}) {
      const std::vector<float> x = testing::random_values(n, 8);
      std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
      codec.encode(x.data(), n, payload.data(), 99);
      std::vector<float> y(x.size());
      codec.decode(payload.data(), n, y.data(), 99);
      const double norm = norm_of(x);
      const double step = static_cast<float>(norm) / static_cast<float>(s);
      for (std::size_t i = 0; i < x.size(); ++i) {
        const double level = std::fabs(y[i]) / step;
        const double exact = std::fabs(x[i]) / norm * s;
        EXPECT_NEAR(level, std::round(level), 1e-3) << "bits " << bits << " element " << i;
        EXPECT_GE(std::round(level), std::floor(exact - 1e-4)) << "bits " << bits << " " << i;
        EXPECT_LE(std::round(level), std::ceil(exact + 1e-4)) << "bits " << bits << " " << i;
        if (y[i] != 0.0f) {
          EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
        }
      }
    }
  }
}

TEST(QsgdCodec, ZerosStayZero) {
  QsgdCodec codec(4);
  const std::vector<float> x(300, 0.0f);
  std::vector<std::uint8_t> payload(codec.encoded_bytes(300));
  codec.encode(x.data(), 300, payload.data(), 1);
  std::vector<float> y(300, 1.0f);
  codec.decode(payload.data(), 300, y.data(), 1);
  EXPECT_EQ(y, x);
}

TEST(QsgdCodec, UnbiasedOverSeeds) {
  // 4000 fixed seeds: the test is deterministic. The mean of S draws of element i has standard
  // deviation at most (norm / s) / (2 sqrt(S)); allow 6 of them.
  constexpr int kSeeds = 4000;
  for (int bits : {2, 4}) {
    QsgdCodec codec(bits);
    const std::int64_t n = 257;
    const std::vector<float> x = testing::random_values(n, 12);
    std::vector<double> mean(x.size(), 0.0);
    std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
    std::vector<float> y(x.size());
    for (int seed = 0; seed < kSeeds; ++seed) {
      codec.encode(x.data(), n, payload.data(), static_cast<std::uint64_t>(seed));
      codec.decode(payload.data(), n, y.data(), 0);
      for (std::size_t i = 0; i < x.size(); ++i) mean[i] += y[i] / double{kSeeds};
    }
    const double sd = norm_of(x) / codec.levels() / (2.0 * std::sqrt(double{kSeeds}));
    for (std::size_t i = 0; i < x.size(); ++i) {
      EXPECT_NEAR(mean[i], x[i], 6.0 * sd) << "bits " << bits << " element " << i;
    }
  }
}

TEST(QsgdCodec, TheSeedChangesTheDitherNotTheNorm) {
  QsgdCodec codec(3);
  const std::int64_t n = 1000;
  const std::vector<float> x = testing::random_values(n, 2);
  std::vector<std::uint8_t> a(codec.encoded_bytes(n)), b(codec.encoded_bytes(n));
  codec.encode(x.data(), n, a.data(), 1);
  codec.encode(x.data(), n, b.data(), 2);
  EXPECT_TRUE(std::equal(a.begin(), a.begin() + 4, b.begin()));  // the norm
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace dtrain::compress
