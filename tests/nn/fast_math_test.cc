// fast_exp and fast_erf against libm in double on dense grids (the bounds fast_math.h states),
// their edge values, and the lane reductions against plain loops.
#include "dtrain/nn/fast_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dtrain::nn {
namespace {

TEST(FastMathTest, ExpIsWithinOneUlpOverTheWholeRange) {
  double worst = 0.0;
  float worst_at = 0.0f;
  for (double v = -87.0; v <= 88.0; v += 1.7e-3) {
    const auto x = static_cast<float>(v);
    const double exact = std::exp(static_cast<double>(x));
    const double rel = std::fabs(fast_exp(x) - exact) / exact;
    if (rel > worst) {
      worst = rel;
      worst_at = x;
    }
  }
  EXPECT_LE(worst, 1.2e-7) << "at x = " << worst_at;
}

TEST(FastMathTest, ExpEdges) {
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_EQ(fast_exp(-88.0f), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isfinite(fast_exp(1000.0f)));
  EXPECT_NEAR(fast_exp(1.0f), 2.718281828, 3e-7);
}

TEST(FastMathTest, ErfIsWithinItsStatedBound) {
  double worst = 0.0;
  float worst_at = 0.0f;
  for (double v = -8.0; v <= 8.0; v += 3.1e-4) {
    const auto x = static_cast<float>(v);
    const double err = std::fabs(fast_erf(x) - std::erf(static_cast<double>(x)));
    if (err > worst) {
      worst = err;
      worst_at = x;
    }
  }
  EXPECT_LE(worst, 3.5e-7) << "at x = " << worst_at;
  EXPECT_EQ(fast_erf(0.0f), 0.0f);
  EXPECT_EQ(fast_erf(-2.0f), -fast_erf(2.0f));
  EXPECT_NEAR(fast_erf(100.0f), 1.0, 1e-7);
  EXPECT_NEAR(fast_erf(-INFINITY), -1.0, 1e-7);
}

TEST(FastMathTest, LaneReductionsMatchPlainLoops) {
  for (std::int64_t n : {1, 5, 16, 17, 33, 128, 257}) {
    std::vector<float> v(static_cast<std::size_t>(n));
    double exact = 0.0;
    float max = -1e30f;
    for (std::int64_t i = 0; i < n; ++i) {
      v[static_cast<std::size_t>(i)] = std::sin(0.7f * static_cast<float>(i)) * 3.0f;
      exact += v[static_cast<std::size_t>(i)];
      max = std::max(max, v[static_cast<std::size_t>(i)]);
    }
    EXPECT_NEAR(lane_sum(n, [&](std::int64_t i) { return v[static_cast<std::size_t>(i)]; }), exact,
                1e-5)
        << n;
    EXPECT_EQ(lane_max(v.data(), n), max) << n;
  }
}

#if defined(__AVX512F__)
// fast_exp16 is fast_exp on 16 lanes bit for bit (edges and the flush to 0 included), and the
// 16-lane reductions give the sum and the maximum.
TEST(FastMathTest, SixteenLaneExpAndReductionsMatchTheScalarForms) {
  std::vector<float> xs{0.0f,   1.0f,   -1.0f,    88.0f,     1000.0f, -87.0f,
                        -87.2f, -87.4f, -1000.0f, -INFINITY, 1e-30f,  -3.5f};
  for (double v = -90.0; v <= 90.0; v += 0.0137) xs.push_back(static_cast<float>(v));
  while (xs.size() % 16 != 0) xs.push_back(0.5f);
  for (std::size_t i = 0; i < xs.size(); i += 16) {
    alignas(64) float out[16];
    _mm512_store_ps(out, fast_exp16(_mm512_loadu_ps(xs.data() + i)));
    for (std::size_t j = 0; j < 16; ++j) ASSERT_EQ(out[j], fast_exp(xs[i + j])) << xs[i + j];
  }
  alignas(64) float v[16];
  double sum = 0.0;
  for (int j = 0; j < 16; ++j) {
    v[j] = std::sin(1.3f * static_cast<float>(j)) * 5.0f;
    sum += v[j];
  }
  v[11] = 7.5f;
  sum += 7.5 - std::sin(1.3f * 11.0f) * 5.0f;
  EXPECT_NEAR(reduce_add16(_mm512_load_ps(v)), sum, 1e-5);
  EXPECT_EQ(reduce_max16(_mm512_load_ps(v)), 7.5f);
  // A NaN stays NaN in every lane it is in (a diverged run must show it, not hide it as exp(-87)).
  alignas(64) float with_nan[16];
  for (int j = 0; j < 16; ++j) with_nan[j] = j % 3 == 0 ? NAN : static_cast<float>(j) - 8.0f;
  alignas(64) float out[16];
  _mm512_store_ps(out, fast_exp16(_mm512_load_ps(with_nan)));
  for (int j = 0; j < 16; ++j) {
    if (j % 3 == 0) {
      EXPECT_TRUE(std::isnan(out[j])) << j << ": " << out[j];
    } else {
      EXPECT_EQ(out[j], fast_exp(with_nan[j])) << j;
    }
  }
}
#endif

}  // namespace
}  // namespace dtrain::nn
