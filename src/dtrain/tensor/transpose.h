// Out-of-place matrix transpose, row-major: dst[c, r] = src[r, c] for a rows x cols source.
//
// Calls OpenBLAS's cblas_somatcopy (alpha = 1, so every value is copied exactly). A transpose is a
// pure data movement, 2 x rows x cols x 4 bytes of traffic: 64 x 256 floats (Linear's forward at
// batch 64, see nn/linear.h) take about 2 us on the development VM, where a plain double loop took
// 10 us.
#pragma once

#include <cstdint>

namespace dtrain::tensor {

// src: rows x cols with row stride ld_src >= cols; dst: cols x rows with row stride ld_dst >= rows.
void transpose(std::int64_t rows, std::int64_t cols, const float* src, std::int64_t ld_src,
               float* dst, std::int64_t ld_dst);

}  // namespace dtrain::tensor
