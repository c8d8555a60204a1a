// im2col / col2im: lay out convolution patches as matrix columns so that a convolution is one GEMM.
//
// For one image x of shape (C, H, W), a KH x KW kernel, stride S and zero padding P:
//   OH = (H + 2P - KH) / S + 1, OW = (W + 2P - KW) / S + 1
//   cols has shape (C*KH*KW, OH*OW): cols[(c*KH + i)*KW + j, oh*OW + ow] = x[c, oh*S - P + i,
//   ow*S - P + j], or 0 outside the image.
// Then y (F, OH*OW) = W (F, C*KH*KW) x cols. col2im is the adjoint: it adds each column entry back
// to the pixel it came from (accumulating, so dx must be zeroed by the caller), which gives dx from
// dcols = W^T x dy. Cost: C*KH*KW*OH*OW reads and writes each.
#pragma once

#include <cstdint>

namespace dtrain::tensor {

struct ConvGeometry {
  std::int64_t channels = 0, height = 0, width = 0;
  std::int64_t kernel_h = 0, kernel_w = 0;
  std::int64_t stride = 1, padding = 0;

  std::int64_t out_height() const { return (height + 2 * padding - kernel_h) / stride + 1; }
  std::int64_t out_width() const { return (width + 2 * padding - kernel_w) / stride + 1; }
  std::int64_t col_rows() const { return channels * kernel_h * kernel_w; }
  std::int64_t col_cols() const { return out_height() * out_width(); }
};

void im2col(const ConvGeometry& g, const float* image, float* cols);
void col2im(const ConvGeometry& g, const float* cols, float* image);

// The reference twins: the definition above, one element at a time.
void im2col_naive(const ConvGeometry& g, const float* image, float* cols);
void col2im_naive(const ConvGeometry& g, const float* cols, float* image);

}  // namespace dtrain::tensor
