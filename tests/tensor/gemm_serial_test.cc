// tensor::gemm_serial against gemm_naive for every transpose combination on odd shapes (padded
// leading dimensions, alpha/beta, beta = 0 over NaN), and called from inside compute-pool tasks.
#include "dtrain/tensor/gemm_serial.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/base/thread_pool.h"
#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

struct Dims {
  std::int64_t m, n, k;
};

// Degenerate sizes, and the products of LeNet's convolutions (forward 6x784x25, dW 6x25x784,
// dcols 150x100x16).
const std::vector<Dims> kDims = {{1, 1, 1},      {1, 7, 5},    {9, 1, 3},    {5, 3, 1},
                                 {13, 17, 19},   {6, 784, 25}, {6, 25, 784}, {150, 100, 16},
                                 {16, 150, 100}, {33, 257, 41}};

TEST(GemmSerial, MatchesNaiveForAllTransposes) {
  std::uint64_t seed = 1;
  for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{-0.5f, 0.75f}}) {
    for (const Dims& d : kDims) {
      for (Trans ta : {Trans::kNo, Trans::kYes}) {
        for (Trans tb : {Trans::kNo, Trans::kYes}) {
          const std::int64_t a_rows = ta == Trans::kNo ? d.m : d.k;
          const std::int64_t a_cols = ta == Trans::kNo ? d.k : d.m;
          const std::int64_t b_rows = tb == Trans::kNo ? d.k : d.n;
          const std::int64_t b_cols = tb == Trans::kNo ? d.n : d.k;
          const std::int64_t lda = a_cols + 2, ldb = b_cols + 1, ldc = d.n + 3;
          const auto a = random_values(a_rows * lda, seed++);
          const auto b = random_values(b_rows * ldb, seed++);
          const auto c0 = random_values(d.m * ldc, seed++);
          std::vector<float> fast = c0, naive = c0;
          gemm_serial(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, fast.data(),
                      ldc);
          gemm_naive(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, naive.data(),
                     ldc);
          for (std::int64_t i = 0; i < d.m; ++i) {
            for (std::int64_t j = 0; j < ldc; ++j) {
              const auto idx = static_cast<std::size_t>(i * ldc + j);
              if (j >= d.n) {
                ASSERT_EQ(fast[idx], c0[idx]) << "wrote outside C at (" << i << ", " << j << ")";
                continue;
              }
              // f32 sums of k products of values in [-1, 1]: error grows like sqrt(k) * 6e-8.
              ASSERT_NEAR(fast[idx], naive[idx], 1e-5f * (1.0f + static_cast<float>(d.k)))
                  << "m=" << d.m << " n=" << d.n << " k=" << d.k << " ta=" << (ta == Trans::kYes)
                  << " tb=" << (tb == Trans::kYes) << " at (" << i << ", " << j << ")";
            }
          }
        }
      }
    }
  }
}

TEST(GemmSerial, BetaZeroIgnoresNaN) {
  const std::int64_t m = 6, n = 784, k = 25;
  const auto a = random_values(m * k, 1);
  const auto b = random_values(k * n, 2);
  std::vector<float> c(static_cast<std::size_t>(m * n), std::nanf(""));
  std::vector<float> ref(c.size());
  gemm_serial(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  gemm_naive(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, ref.data(), n);
  for (std::size_t i = 0; i < c.size(); ++i) ASSERT_NEAR(c[i], ref[i], 1e-4f) << i;
}

// Two pool tasks each run their own products at once (as Conv2d's batch parts do): each result
// has the same bits as the same product run alone on the calling thread.
TEST(GemmSerial, SameBitsInsidePoolTasks) {
  const std::int64_t m = 16, n = 150, k = 100;
  const auto a = random_values(2 * m * k, 3);
  const auto b = random_values(k * n, 4);
  std::vector<float> alone(static_cast<std::size_t>(2 * m * n));
  std::vector<float> pooled(alone.size());
  for (int t = 0; t < 2; ++t) {
    gemm_serial(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data() + t * m * k, k, b.data(), n, 0.0f,
                alone.data() + t * m * n, n);
  }
  set_compute_threads(2);
  compute_pool().run(2, [&](int t) {
    gemm_serial(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data() + t * m * k, k, b.data(), n, 0.0f,
                pooled.data() + t * m * n, n);
  });
  set_compute_threads(1);
  EXPECT_EQ(alone, pooled);
}

// [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50].
TEST(GemmSerial, HandComputed) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<float> c(4, 0.0f);
  gemm_serial(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
}

}  // namespace
}  // namespace dtrain::tensor
