#include "dtrain/tensor/gemm_serial.h"

#include <cblas.h>

#include <mutex>

namespace dtrain::tensor {

void gemm_serial(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  // OpenBLAS must not start its own threads under ours (gemm.h pins it the same way).
  static std::once_flag once;
  std::call_once(once, [] { openblas_set_num_threads(1); });
  cblas_sgemm(CblasRowMajor, trans_a == Trans::kYes ? CblasTrans : CblasNoTrans,
              trans_b == Trans::kYes ? CblasTrans : CblasNoTrans, static_cast<blasint>(m),
              static_cast<blasint>(n), static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda),
              b, static_cast<blasint>(ldb), beta, c, static_cast<blasint>(ldc));
}

}  // namespace dtrain::tensor
