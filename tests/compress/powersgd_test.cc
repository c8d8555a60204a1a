// PowerSGD (powersgd.h): the matrix shape of n elements; with rank = min(rows, cols) the
// approximation is exact; at a lower rank the warm-started power iteration's error on a fixed
// matrix does not grow from step to step and approaches the best rank-r error; project_out
// removes exactly the span of P.
#include "dtrain/compress/powersgd.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/rng.h"
#include "random_values.h"

namespace dtrain::compress {
namespace {

double distance(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) s += double(a[i] - b[i]) * double(a[i] - b[i]);
  return std::sqrt(s);
}

TEST(LowRankShape, NearSquareAndJustLargeEnough) {
  for (std::int64_t n : {1, 2, 7, 12, 1000, 1000003}) {
    const LowRankShape shape = LowRankShape::of(n);
    EXPECT_EQ(shape.cols, static_cast<std::int64_t>(std::ceil(std::sqrt(double(n))))) << n;
    EXPECT_GE(shape.rows * shape.cols, n);
    EXPECT_LT((shape.rows - 1) * shape.cols, n);
  }
  EXPECT_EQ(LowRankShape::of(7).rows, 3);
  EXPECT_EQ(LowRankShape::of(1000003).rows, 1000);
}

TEST(PowerSgd, FullRankReconstructsExactly) {
  for (std::int64_t n : {1, 7, 12, 1000, 4099}) {
    const LowRankShape shape = LowRankShape::of(n);
    const int rank = static_cast<int>(std::min(shape.rows, shape.cols));
    PowerSgd power(n, rank, 3);
    EXPECT_FALSE(power.compresses());
    const std::vector<float> x = testing::random_values(n, 40);
    std::vector<float> y(x.size());
    power.compress(x.data(), y.data());
    for (std::size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], 1e-5) << n << " " << i;
  }
}

TEST(PowerSgd, WarmStartLowersTheErrorOnAFixedMatrix) {
  // M = sum_j sigma_j u_j v_j^T, sigma = 8 x 0.8^j for 6 random pairs: rank 2 has to find the
  // first two directions. One step from the random start (no warm start: a fresh state each
  // time) leaves more error than steps that start from the previous Q.
  const std::int64_t rows = 60, cols = 60, n = rows * cols;
  Rng rng(77);
  std::vector<float> m(static_cast<std::size_t>(n), 0.0f);
  float sigma = 8.0f;
  for (int j = 0; j < 6; ++j, sigma *= 0.8f) {
    std::vector<float> u(rows), v(cols);
    for (float& e : u) e = rng.normal();
    for (float& e : v) e = rng.normal();
    for (std::int64_t r = 0; r < rows; ++r) {
      for (std::int64_t c = 0; c < cols; ++c) m[r * cols + c] += sigma * u[r] * v[c];
    }
  }
  std::vector<float> y(m.size());
  PowerSgd cold(n, 2, 1);
  cold.compress(m.data(), y.data());
  const double cold_error = distance(m, y);

  PowerSgd power(n, 2, 1);
  ASSERT_EQ(power.rows(), rows);
  EXPECT_TRUE(power.compresses());
  std::vector<double> errors;
  for (int step = 0; step < 100; ++step) {
    power.compress(m.data(), y.data());
    errors.push_back(distance(m, y));
  }
  EXPECT_EQ(errors.front(), cold_error);  // the first step is the cold one
  for (std::size_t s = 1; s < errors.size(); ++s) {
    EXPECT_LE(errors[s], errors[s - 1] * (1.0 + 1e-5)) << "step " << s;
  }
  // Converged (step 100) well below the cold error, and reached within 8 steps.
  EXPECT_LT(errors.back(), 0.9 * cold_error);
  EXPECT_LT(errors[7], errors.back() * 1.001);
}

TEST(PowerSgd, ThePaddingIsZeroAtEveryStep) {
  // 1000 elements are a 32 x 32 matrix with 24 zeros at the end: over steps (decode uses the
  // matrix as scratch) the result must equal that of the same 1024 values with the zeros given.
  const std::vector<float> x = testing::random_values(1000, 50);
  std::vector<float> padded(x);
  padded.resize(1024, 0.0f);
  PowerSgd a(1000, 2, 4), b(1024, 2, 4);
  ASSERT_EQ(a.rows(), b.rows());
  std::vector<float> ya(1000), yb(1024);
  for (int step = 0; step < 3; ++step) {
    a.compress(x.data(), ya.data());
    b.compress(padded.data(), yb.data());
    for (std::size_t i = 0; i < ya.size(); ++i) ASSERT_EQ(ya[i], yb[i]) << step << " " << i;
  }
}

// project_out (momentum correction's masking): x - P (P^T x), against the product done in double,
// on a padded near-square view (1000 elements as 32 x 32) and on a tensor's own shape.
TEST(PowerSgd, ProjectOutRemovesTheSpanOfP) {
  PowerSgd power(1000, 3, 6);
  const std::vector<float> m = testing::random_values(1000, 61);
  power.compute_p(m.data());
  power.orthogonalize();
  const std::vector<float> x = testing::random_values(1000, 62);
  std::vector<float> y(x);
  power.project_out(y.data());
  const std::int64_t rows = power.rows(), cols = power.cols();
  const float* p = power.p();
  for (std::int64_t c = 0; c < cols; ++c) {
    std::vector<double> along(3, 0.0);
    for (int k = 0; k < 3; ++k) {
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t i = r * cols + c;
        along[k] += double{p[r * 3 + k]} * (i < 1000 ? x[i] : 0.0);
      }
    }
    for (std::int64_t r = 0; r < rows && r * cols + c < 1000; ++r) {
      const std::int64_t i = r * cols + c;
      double want = x[i];
      for (int k = 0; k < 3; ++k) want -= double{p[r * 3 + k]} * along[k];
      ASSERT_NEAR(y[i], want, 1e-5) << "element " << i;
    }
  }
  // Unpadded (a 20 x 30 tensor), a second projection changes nothing (to rounding): no part along
  // P was left. (Padded, the part that P P^T x puts in the padding is dropped, as decode drops it.)
  PowerSgd matrix(LowRankShape{20, 30}, 2, 7);
  const std::vector<float> m2 = testing::random_values(600, 63);
  matrix.compute_p(m2.data());
  matrix.orthogonalize();
  std::vector<float> once = testing::random_values(600, 64);
  const std::vector<float> before(once);
  matrix.project_out(once.data());
  std::vector<float> twice(once);
  matrix.project_out(twice.data());
  EXPECT_GT(distance(once, before), 0.1);
  EXPECT_LT(distance(twice, once), 1e-5 * distance(once, std::vector<float>(600, 0.0f)));
}

TEST(PowerSgd, AllRanksWithOneSeedStartFromTheSameQ) {
  PowerSgd a(1000, 2, 9), b(1000, 2, 9), c(1000, 2, 10);
  EXPECT_TRUE(std::equal(a.q(), a.q() + a.q_count(), b.q()));
  EXPECT_FALSE(std::equal(a.q(), a.q() + a.q_count(), c.q()));
}

}  // namespace
}  // namespace dtrain::compress
