#include "dtrain/tensor/im2col.h"

#include <algorithm>

namespace dtrain::tensor {

// The fast path walks each (channel, i, j) row of cols once, and for each output row oh computes
// the valid range of ow whose input column lies inside the image, so the inner loop has no bounds
// test (and is a plain vectorisable copy when the stride is 1).
void im2col(const ConvGeometry& g, const float* image, float* cols) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c) {
    const float* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t j = 0; j < g.kernel_w; ++j) {
        float* row = cols + ((c * g.kernel_h + i) * g.kernel_w + j) * oh_count * ow_count;
        // ow is valid when 0 <= ow*S - P + j < W.
        const std::int64_t ow_begin =
            std::clamp<std::int64_t>((g.padding - j + g.stride - 1) / g.stride, 0, ow_count);
        const std::int64_t ow_end = std::clamp<std::int64_t>(
            (g.width + g.padding - j + g.stride - 1) / g.stride, ow_begin, ow_count);
        for (std::int64_t oh = 0; oh < oh_count; ++oh) {
          float* out = row + oh * ow_count;
          const std::int64_t y = oh * g.stride - g.padding + i;
          if (y < 0 || y >= g.height) {
            for (std::int64_t ow = 0; ow < ow_count; ++ow) out[ow] = 0.0f;
            continue;
          }
          const float* in = plane + y * g.width;
          for (std::int64_t ow = 0; ow < ow_begin; ++ow) out[ow] = 0.0f;
          if (g.stride == 1) {
            // An inline loop, not memcpy: rows are 10 to 30 floats, shorter than a call costs.
            const float* src = in - g.padding + j;
            for (std::int64_t ow = ow_begin; ow < ow_end; ++ow) out[ow] = src[ow];
          } else {
            for (std::int64_t ow = ow_begin; ow < ow_end; ++ow) {
              out[ow] = in[ow * g.stride - g.padding + j];
            }
          }
          for (std::int64_t ow = ow_end; ow < ow_count; ++ow) out[ow] = 0.0f;
        }
      }
    }
  }
}

void col2im(const ConvGeometry& g, const float* cols, float* image) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c) {
    float* plane = image + c * g.height * g.width;
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t j = 0; j < g.kernel_w; ++j) {
        const float* row = cols + ((c * g.kernel_h + i) * g.kernel_w + j) * oh_count * ow_count;
        const std::int64_t ow_begin =
            std::clamp<std::int64_t>((g.padding - j + g.stride - 1) / g.stride, 0, ow_count);
        const std::int64_t ow_end = std::clamp<std::int64_t>(
            (g.width + g.padding - j + g.stride - 1) / g.stride, ow_begin, ow_count);
        for (std::int64_t oh = 0; oh < oh_count; ++oh) {
          const std::int64_t y = oh * g.stride - g.padding + i;
          if (y < 0 || y >= g.height) continue;
          const float* in = row + oh * ow_count;
          float* out = plane + y * g.width - g.padding + j;
          if (g.stride == 1) {
            for (std::int64_t ow = ow_begin; ow < ow_end; ++ow) out[ow] += in[ow];
          } else {
            for (std::int64_t ow = ow_begin; ow < ow_end; ++ow) out[ow * g.stride] += in[ow];
          }
        }
      }
    }
  }
}

void im2col_naive(const ConvGeometry& g, const float* image, float* cols) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c)
    for (std::int64_t i = 0; i < g.kernel_h; ++i)
      for (std::int64_t j = 0; j < g.kernel_w; ++j)
        for (std::int64_t oh = 0; oh < oh_count; ++oh)
          for (std::int64_t ow = 0; ow < ow_count; ++ow) {
            const std::int64_t y = oh * g.stride - g.padding + i;
            const std::int64_t x = ow * g.stride - g.padding + j;
            const bool inside = y >= 0 && y < g.height && x >= 0 && x < g.width;
            cols[((c * g.kernel_h + i) * g.kernel_w + j) * oh_count * ow_count + oh * ow_count +
                 ow] = inside ? image[(c * g.height + y) * g.width + x] : 0.0f;
          }
}

void col2im_naive(const ConvGeometry& g, const float* cols, float* image) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c)
    for (std::int64_t i = 0; i < g.kernel_h; ++i)
      for (std::int64_t j = 0; j < g.kernel_w; ++j)
        for (std::int64_t oh = 0; oh < oh_count; ++oh)
          for (std::int64_t ow = 0; ow < ow_count; ++ow) {
            const std::int64_t y = oh * g.stride - g.padding + i;
            const std::int64_t x = ow * g.stride - g.padding + j;
            if (y < 0 || y >= g.height || x < 0 || x >= g.width) continue;
            image[(c * g.height + y) * g.width + x] +=
                cols[((c * g.kernel_h + i) * g.kernel_w + j) * oh_count * ow_count + oh * ow_count +
                     ow];
          }
}

}  // namespace dtrain::tensor
