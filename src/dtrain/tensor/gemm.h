// General matrix multiply, row-major: C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C.
//
// op(X) is X or its transpose. lda/ldb/ldc are row strides in elements of the matrices as stored
// (A is [M,K] when not transposed and [K,M] when transposed; likewise B). Cost: 2*M*N*K FLOPs.
//
// gemm() calls OpenBLAS's cblas_sgemm. With compute_threads() = T > 1 it cuts C into T slices
// (rows when M >= N, else columns) and runs one single-threaded cblas_sgemm per slice on the
// compute pool: OpenBLAS's own threading does poorly on the small, skinny products of a training
// step (batch 128). Results are repeatable for a given T, but not bitwise equal across values of T:
// OpenBLAS picks its kernel by the slice's shape, and a different kernel may sum in another order.
// gemm_naive() is the reference: the triple loop, accumulated in double.
#pragma once

#include <cstdint>

namespace dtrain::tensor {

enum class Trans { kNo, kYes };

void gemm(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
          float beta, float* c, std::int64_t ldc);

// Ends the threads OpenBLAS started for itself (the pthread build starts them when it is loaded;
// dtrain never uses them, see above), so that a process can fork with one thread (a fork server's
// template, train/fork_server.h). They are started again if OpenBLAS is ever asked for threads.
// Nothing with an OpenBLAS build that has no such threads.
void stop_blas_threads();

void gemm_naive(Trans trans_a, Trans trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                float alpha, const float* a, std::int64_t lda, const float* b, std::int64_t ldb,
                float beta, float* c, std::int64_t ldc);

}  // namespace dtrain::tensor
