// Whether this machine's OpenBLAS kernels sum each output of a product in an order that does not
// depend on the shape of the call: the same result, bit for bit, for an output computed in one
// sgemm or in a slice of it (tensor/gemm.cc slices products over the compute threads), and for
// A B^T or the transpose of B A^T (nn/linear.h's transposed forward). OpenBLAS 0.3.21's SkylakeX
// kernels (AVX-512 Intel) do; its Haswell kernels, which it picks on AMD Zen too, do not (about a
// third of the outputs differ in the last bits). Tests of dtrain's bitwise claims skip where the
// library itself does not hold them, saying which kernels it chose.
#pragma once

#include <cblas.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dtrain::testing_support {

inline bool blas_sums_independent_of_call_shape() {
  constexpr int m = 70, n = 333, k = 129, cut = 176;
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  std::vector<float> a(m * k), b(n * k), whole(m * n), sliced(m * n), transposed(n * m);
  for (float& v : a) v = normal(random);
  for (float& v : b) v = normal(random);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, k, 1.0f, a.data(), k, b.data(), k,
              0.0f, whole.data(), n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, cut, k, 1.0f, a.data(), k, b.data(), k,
              0.0f, sliced.data(), n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n - cut, k, 1.0f, a.data(), k,
              b.data() + cut * k, k, 0.0f, sliced.data() + cut, n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, b.data(), k, a.data(), k,
              0.0f, transposed.data(), m);
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) {
      if (std::memcmp(&whole[i * n + j], &sliced[i * n + j], sizeof(float)) != 0 ||
          std::memcmp(&whole[i * n + j], &transposed[j * m + i], sizeof(float)) != 0) {
        return false;
      }
    }
  }
  return true;
}

inline std::string blas_kernels_name() { return openblas_get_corename(); }

}  // namespace dtrain::testing_support
