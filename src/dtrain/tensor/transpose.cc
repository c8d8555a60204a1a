#include "dtrain/tensor/transpose.h"

#include <cblas.h>

namespace dtrain::tensor {

void transpose(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld_src,
               float* dst, std::int64_t ld_dst) {
  if (rows == 0 || cols == 0) return;
  cblas_somatcopy(CblasRowMajor, CblasTrans, static_cast<blasint>(rows), static_cast<blasint>(cols),
                  1.0f, src, static_cast<blasint>(ld_src), dst, static_cast<blasint>(ld_dst));
}

}  // namespace dtrain::tensor
