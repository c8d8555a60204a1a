// Helpers of the spatial-split tests (tests/parallel/spatial_*_test.cc): a rank's band of a batch,
// and the relative difference its outputs and gradients are judged by.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "dtrain/tensor/tensor.h"

namespace dtrain::testing {

// Rows [begin, begin + rows) of every plane of x (B, C, H, W).
inline tensor::Tensor band(const tensor::Tensor& x, std::int64_t begin, std::int64_t rows) {
  const std::int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  tensor::Tensor out = tensor::Tensor::empty({x.dim(0), x.dim(1), rows, w});
  for (std::int64_t p = 0; p < planes; ++p) {
    for (std::int64_t i = 0; i < rows * w; ++i) {
      out.data()[p * rows * w + i] = x.data()[(p * h + begin) * w + i];
    }
  }
  return out;
}

// ||a - b|| / max(||b||, floor): a gradient that is zero up to rounding (a bias before a batch
// norm, which removes its effect) is compared absolutely, to floor x the tolerance.
inline double relative(const float* a, const float* b, std::int64_t n, double floor = 1e-2) {
  double diff = 0.0, norm = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), floor);
}

}  // namespace dtrain::testing
