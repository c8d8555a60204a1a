// gemm_serial: the product of gemm.h on the calling thread only, never on the compute pool.
//
// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C, row-major, same arguments as tensor::gemm.
// For kernels that are already split over the pool (a convolution hands each thread whole images)
// and call one small product per image from inside a pool task: tensor::gemm would find the pool
// busy and run inline anyway, but gemm_serial says so and skips the slicing logic. One
// single-threaded cblas_sgemm call (OpenBLAS's own threads stay pinned at 1), so its result depends
// only on its arguments, never on the thread count. Cost: 2*M*N*K FLOPs.
#pragma once

#include <cstdint>

#include "dtrain/tensor/gemm.h"

namespace dtrain::tensor {

void gemm_serial(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                 float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                 float beta, float* c, std::int64_t ldc);

}  // namespace dtrain::tensor
