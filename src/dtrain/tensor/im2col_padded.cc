#include "dtrain/tensor/im2col_padded.h"

#include <algorithm>
#include <cstring>

#include "dtrain/base/error.h"

namespace dtrain::tensor {
namespace {

// Floats per copied block: one 64-byte vector move (two 32-byte ones without AVX-512).
constexpr std::int64_t kBlock = 16;

void check_stride_one(const ConvGeometry& g) {
  DTRAIN_CHECK(g.stride == 1, "im2col_padded handles stride 1 only, got stride {}; use im2col",
               g.stride);
}

}  // namespace

std::int64_t im2col_padded_scratch_size(const ConvGeometry& g) {
  return g.channels * (g.height + 2 * g.padding) * (g.width + 2 * g.padding) + kBlock;
}

void im2col_padded(const ConvGeometry& g, const float* image, float* scratch, float* cols) {
  check_stride_one(g);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t padded_w = g.width + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  // The padded copy: zero borders, the image inside; the slack after it is read by the last spill
  // of each row, never used.
  std::fill(scratch, scratch + im2col_padded_scratch_size(g), 0.0f);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      std::memcpy(scratch + (c * padded_h + y + g.padding) * padded_w + g.padding,
                  image + (c * g.height + y) * g.width,
                  static_cast<std::size_t>(g.width) * sizeof(float));
    }
  }
  const std::int64_t rows = g.col_rows();
  const std::int64_t total = rows * oh_count * ow_count;
  // A row whose blocks would reach past the end of cols (only the last few) is copied exactly.
  const std::int64_t blocked = (ow_count + kBlock - 1) / kBlock * kBlock;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t c = r / (g.kernel_h * g.kernel_w);
    const std::int64_t i = r / g.kernel_w % g.kernel_h;
    const std::int64_t j = r % g.kernel_w;
    const float* src = scratch + (c * padded_h + i) * padded_w + j;
    std::int64_t at = r * oh_count * ow_count;
    for (std::int64_t oh = 0; oh < oh_count; ++oh, src += padded_w, at += ow_count) {
      if (at + blocked > total) {
        std::memcpy(cols + at, src, static_cast<std::size_t>(ow_count) * sizeof(float));
        continue;
      }
      for (std::int64_t ow = 0; ow < ow_count; ow += kBlock) {
        std::memcpy(cols + at + ow, src + ow, kBlock * sizeof(float));
      }
    }
  }
}

void col2im_padded(const ConvGeometry& g, const float* cols, float* scratch, float* image) {
  check_stride_one(g);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t padded_w = g.width + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  std::fill(scratch, scratch + g.channels * padded_h * padded_w, 0.0f);
  const std::int64_t rows = g.col_rows();
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t c = r / (g.kernel_h * g.kernel_w);
    const std::int64_t i = r / g.kernel_w % g.kernel_h;
    const std::int64_t j = r % g.kernel_w;
    float* dst = scratch + (c * padded_h + i) * padded_w + j;
    const float* src = cols + r * oh_count * ow_count;
    for (std::int64_t oh = 0; oh < oh_count; ++oh, dst += padded_w, src += ow_count) {
      for (std::int64_t ow = 0; ow < ow_count; ++ow) dst[ow] += src[ow];
    }
  }
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      std::memcpy(image + (c * g.height + y) * g.width,
                  scratch + (c * padded_h + y + g.padding) * padded_w + g.padding,
                  static_cast<std::size_t>(g.width) * sizeof(float));
    }
  }
}

}  // namespace dtrain::tensor
