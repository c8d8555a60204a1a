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

}  // namespace
}  // namespace dtrain::nn
