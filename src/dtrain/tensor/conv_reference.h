// Direct 2-D convolution, one output element at a time: the reference twin of the im2col + GEMM
// path of nn::Conv2d, used only by tests.
//
// Cross-correlation as in PyTorch, with the geometry of im2col.h (stride S, zero padding P):
//   y[b, f, oh, ow] = bias[f] + sum_{c,i,j} w[f, c, i, j] * x[b, c, oh*S - P + i, ow*S - P + j]
// Sums are accumulated in double, so the reference is more accurate than the code it checks.
// Cost: 2 * B * F * OH * OW * C * KH * KW FLOPs for forward and for each of dx and dw.
#pragma once

#include <cstdint>

#include "dtrain/tensor/im2col.h"

namespace dtrain::tensor {

// x (B, C, H, W), w (F, C, KH, KW), bias (F) or null -> y (B, F, OH, OW), overwritten.
void conv2d_forward_naive(const ConvGeometry& g, std::int64_t batch, std::int64_t filters,
                          const float* x, const float* w, const float* bias, float* y);

// dy (B, F, OH, OW) -> dx (B, C, H, W) overwritten (skipped when null), dw (F, C, KH, KW) and
// db (F) ADDED to (db skipped when null), matching the accumulate-into-grads rule of nn::Layer.
void conv2d_backward_naive(const ConvGeometry& g, std::int64_t batch, std::int64_t filters,
                           const float* x, const float* w, const float* dy, float* dx, float* dw,
                           float* db);

}  // namespace dtrain::tensor
