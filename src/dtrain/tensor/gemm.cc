#include "dtrain/tensor/gemm.h"

#include <cblas.h>

#include <mutex>

#include "dtrain/base/thread_pool.h"

// OpenBLAS's pthread build (openblas-pthread) exports it; other builds may not: weak.
extern "C" int blas_thread_shutdown_(void) __attribute__((weak));

namespace dtrain::tensor {
namespace {

// OpenBLAS threads stay at 1: parallelism comes from slicing on the compute pool (see gemm.h).
void pin_openblas_to_one_thread() {
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
}

void sgemm(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
           float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
           float beta, float* c, std::int64_t ldc) {
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a,
              static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

// Below this many FLOPs per slice, waking another thread costs more than it saves.
constexpr std::int64_t kMinFlopsPerSlice = 1 << 18;

}  // namespace

void stop_blas_threads() {
  if (blas_thread_shutdown_ != nullptr) blas_thread_shutdown_();
}

void gemm(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  pin_openblas_to_one_thread();
  ThreadPool& pool = compute_pool();
  const std::int64_t flops = 2 * m * n * k;
  int slices = pool.threads();
  if (flops < kMinFlopsPerSlice * 2) slices = 1;
  if (slices == 1) {
    sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  const bool split_rows = m >= n;
  const std::int64_t extent = split_rows ? m : n;
  pool.run(slices, [&](int slice) {
    // Slice boundaries rounded to 16 elements keep every slice's start 64-byte aligned.
    auto boundary = [&](int s) {
      const std::int64_t raw = extent * s / slices;
      return s == slices ? extent : std::min(extent, (raw + 15) / 16 * 16);
    };
    const std::int64_t begin = boundary(slice);
    const std::int64_t end = boundary(slice + 1);
    if (begin >= end) return;
    if (split_rows) {
      const float* a_slice = trans_a == Trans::kNo ? a + begin * lda : a + begin;
      sgemm(trans_a, trans_b, end - begin, n, k, alpha, a_slice, lda, b, ldb, beta,
            c + begin * ldc, ldc);
    } else {
      const float* b_slice = trans_b == Trans::kNo ? b + begin : b + begin * ldb;
      sgemm(trans_a, trans_b, m, end - begin, k, alpha, a, lda, b_slice, ldb, beta, c + begin,
            ldc);
    }
  });
}

void gemm_naive(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                float beta, float* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (std::int64_t p = 0; p < k; ++p) {
        const float a_ip = trans_a == Trans::kNo ? a[i * lda + p] : a[p * lda + i];
        const float b_pj = trans_b == Trans::kNo ? b[p * ldb + j] : b[j * ldb + p];
        sum += static_cast<double>(a_ip) * b_pj;
      }
      float& out = c[i * ldc + j];
      // beta == 0 overwrites (as BLAS does), so NaN in an uninitialised C does not leak through.
      out = static_cast<float>(alpha * sum + (beta == 0.0f ? 0.0 : static_cast<double>(beta) * out));
    }
  }
}

}  // namespace dtrain::tensor
