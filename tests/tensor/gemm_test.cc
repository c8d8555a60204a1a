// tensor::gemm (OpenBLAS, sliced over the compute pool) against gemm_naive for every transpose
// combination on odd shapes, with padded leading dimensions, alpha/beta, and 1 or 2 threads.
#include "dtrain/tensor/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/base/thread_pool.h"
#include "blas_order.h"
#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

struct Dims {
  std::int64_t m, n, k;
};

// Includes m, n or k = 1, shapes below and above the slicing threshold (2*m*n*k >= 2^19), and
// m < n and m >= n so that both the row and the column split run with 2 threads.
const std::vector<Dims> kDims = {{1, 1, 1},     {1, 7, 5},     {9, 1, 3},     {5, 3, 1},
                                 {13, 17, 19},  {6, 100, 25},  {150, 37, 16}, {129, 65, 70},
                                 {33, 257, 41}, {300, 7, 200}, {16, 150, 640}};

void check_all(float alpha, float beta) {
  std::uint64_t seed = 1;
  for (const Dims& d : kDims) {
    for (Trans ta : {Trans::kNo, Trans::kYes}) {
      for (Trans tb : {Trans::kNo, Trans::kYes}) {
        // Stored shapes: A is [m,k] or [k,m], B is [k,n] or [n,k]; leading dimensions padded by 3.
        const std::int64_t a_rows = ta == Trans::kNo ? d.m : d.k;
        const std::int64_t a_cols = ta == Trans::kNo ? d.k : d.m;
        const std::int64_t b_rows = tb == Trans::kNo ? d.k : d.n;
        const std::int64_t b_cols = tb == Trans::kNo ? d.n : d.k;
        const std::int64_t lda = a_cols + 3, ldb = b_cols + 3, ldc = d.n + 3;
        const auto a = random_values(a_rows * lda, seed++);
        const auto b = random_values(b_rows * ldb, seed++);
        const auto c0 = random_values(d.m * ldc, seed++);
        std::vector<float> fast = c0, naive = c0;
        gemm(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, fast.data(), ldc);
        gemm_naive(ta, tb, d.m, d.n, d.k, alpha, a.data(), lda, b.data(), ldb, beta, naive.data(),
                   ldc);
        for (std::int64_t i = 0; i < d.m; ++i) {
          for (std::int64_t j = 0; j < ldc; ++j) {
            const auto idx = static_cast<std::size_t>(i * ldc + j);
            if (j >= d.n) {
              // Padding columns of C are not part of the product and must stay untouched.
              ASSERT_EQ(fast[idx], c0[idx]) << "gemm wrote outside C at (" << i << ", " << j << ")";
              continue;
            }
            // f32 sums of k products of values in [-1, 1]: error grows like sqrt(k) * 6e-8.
            const float tol = 1e-5f * (1.0f + static_cast<float>(d.k));
            ASSERT_NEAR(fast[idx], naive[idx], tol)
                << "m=" << d.m << " n=" << d.n << " k=" << d.k << " ta=" << (ta == Trans::kYes)
                << " tb=" << (tb == Trans::kYes) << " at (" << i << ", " << j << ")";
          }
        }
      }
    }
  }
}

class GemmThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { set_compute_threads(GetParam()); }
  void TearDown() override { set_compute_threads(1); }
};

TEST_P(GemmThreads, MatchesNaiveOverwrite) { check_all(1.0f, 0.0f); }
TEST_P(GemmThreads, MatchesNaiveAlphaBeta) { check_all(-0.5f, 0.75f); }

// beta = 0 must ignore what C held, even NaN (BLAS semantics), in both paths.
TEST_P(GemmThreads, BetaZeroIgnoresNaN) {
  const std::int64_t m = 64, n = 96, k = 50;  // above the slicing threshold
  const auto a = random_values(m * k, 1);
  const auto b = random_values(k * n, 2);
  std::vector<float> c(static_cast<std::size_t>(m * n), std::nanf(""));
  std::vector<float> ref(c.size(), std::nanf(""));
  gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n);
  gemm_naive(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, ref.data(), n);
  for (std::size_t i = 0; i < c.size(); ++i) {
    ASSERT_FALSE(std::isnan(c[i])) << i;
    ASSERT_NEAR(c[i], ref[i], 1e-4f) << i;
  }
}

// Slicing over threads must not change any output bit: each element's sum is one sgemm's.
TEST(Gemm, BitwiseIdenticalAcrossThreadCounts) {
  if (!testing_support::blas_sums_independent_of_call_shape()) {
    GTEST_SKIP() << "OpenBLAS's " << testing_support::blas_kernels_name()
                 << " kernels sum a slice's outputs in another order than the whole product's";
  }
  const std::int64_t m = 70, n = 333, k = 129;
  const auto a = random_values(m * k, 3);
  const auto b = random_values(k * n, 4);
  std::vector<float> one(static_cast<std::size_t>(m * n)), two(one.size());
  set_compute_threads(1);
  gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, one.data(), n);
  set_compute_threads(2);
  gemm(Trans::kNo, Trans::kYes, m, n, k, 1.0f, a.data(), k, b.data(), k, 0.0f, two.data(), n);
  set_compute_threads(1);
  EXPECT_EQ(one, two);
}

// A hand-computed product: [1 2; 3 4] x [5 6; 7 8] = [19 22; 43 50].
TEST(Gemm, HandComputed) {
  const std::vector<float> a = {1, 2, 3, 4}, b = {5, 6, 7, 8};
  std::vector<float> c(4, 0.0f);
  gemm(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{19, 22, 43, 50}));
  // A^T x B = [1 3; 2 4] x [5 6; 7 8] = [26 30; 38 44].
  gemm(Trans::kYes, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, b.data(), 2, 0.0f, c.data(), 2);
  EXPECT_EQ(c, (std::vector<float>{26, 30, 38, 44}));
}

INSTANTIATE_TEST_SUITE_P(Threads, GemmThreads, ::testing::Values(1, 2));

}  // namespace
}  // namespace dtrain::tensor
