#include "dtrain/tensor/im2col_padded.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"

namespace dtrain::tensor {
namespace {

// Floats per copied block: one 64-byte vector move (two 32-byte ones without AVX-512).
constexpr std::int64_t kBlock = 16;

void check_stride_one(const ConvGeometry& g) {
  DTRAIN_CHECK(g.stride == 1, "im2col_padded handles stride 1 only, got stride {}; use im2col",
               g.stride);
}

// Floats per padded row in col2im_padded's copy: W + 2P rounded up to whole 16-float vectors, so
// that a row is read and written as whole vectors without touching the next row.
std::int64_t col2im_row_stride(const ConvGeometry& g) {
  return (g.width + 2 * g.padding + kBlock - 1) / kBlock * kBlock;
}

#if defined(__AVX512F__)
// A 3x3 kernel with padding 1 on rows of at most 16 pixels (a ResNet's stages 2 and 3: 14x14 and
// 7x7 maps) works row by row in registers, without the padded copy: an image row y = oh + i - 1
// is one masked load (zeros past W, and all zeros for the padding rows), and the three kernel
// columns are that row moved up one lane (j = 0: x = ow - 1, 0 at ow = 0), as is (j = 1) and moved
// down one lane (j = 2: x = ow + 1, 0 past the row).
bool three_by_three_short_rows(const ConvGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride == 1 && g.padding == 1 && g.width <= 16;
}

const __m512i kUpOne = _mm512_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
const __m512i kDownOne = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0);
constexpr __mmask16 kNotFirst = 0xfffe;
constexpr __mmask16 kNotLast = 0x7fff;

__mmask16 first_lanes(std::int64_t n) { return static_cast<__mmask16>((1u << n) - 1u); }

void im2col_three_by_three(const ConvGeometry& g, const float* image, float* cols) {
  const std::int64_t oh_count = g.out_height();  // = H
  const std::int64_t ow_count = g.out_width();   // = W
  const std::int64_t plane = oh_count * ow_count;
  const __mmask16 lanes = first_lanes(ow_count);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < 3; ++i) {
      float* out = cols + (c * 3 + i) * 3 * plane;
      for (std::int64_t oh = 0; oh < oh_count; ++oh, out += ow_count) {
        const std::int64_t y = oh + i - 1;
        const __m512 row = y >= 0 && y < g.height
                               ? _mm512_maskz_loadu_ps(lanes, image + (c * g.height + y) * g.width)
                               : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(out, lanes, _mm512_maskz_permutexvar_ps(kNotFirst, kUpOne, row));
        _mm512_mask_storeu_ps(out + plane, lanes, row);
        _mm512_mask_storeu_ps(out + 2 * plane, lanes,
                              _mm512_maskz_permutexvar_ps(kNotLast, kDownOne, row));
      }
    }
  }
}

// The adjoint: image row y sums, from 0 and in (i, j) order as col2im does (the same bits), the
// cols rows (c, i, j) at oh = y + 1 - i, row j = 0 moved down one lane, j = 1 as is, j = 2 moved
// up one lane.
void col2im_three_by_three(const ConvGeometry& g, const float* cols, float* image) {
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t plane = oh_count * ow_count;
  const __mmask16 lanes = first_lanes(ow_count);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      __m512 sum = _mm512_setzero_ps();
      for (std::int64_t i = 0; i < 3; ++i) {
        const std::int64_t oh = y + 1 - i;
        if (oh < 0 || oh >= oh_count) continue;
        const float* in = cols + (c * 3 + i) * 3 * plane + oh * ow_count;
        sum = _mm512_add_ps(
            sum, _mm512_maskz_permutexvar_ps(kNotLast, kDownOne, _mm512_maskz_loadu_ps(lanes, in)));
        sum = _mm512_add_ps(sum, _mm512_maskz_loadu_ps(lanes, in + plane));
        sum = _mm512_add_ps(
            sum, _mm512_maskz_permutexvar_ps(kNotFirst, kUpOne,
                                             _mm512_maskz_loadu_ps(lanes, in + 2 * plane)));
      }
      _mm512_mask_storeu_ps(image + (c * g.height + y) * g.width, lanes, sum);
    }
  }
}
#endif

}  // namespace

std::int64_t im2col_padded_scratch_size(const ConvGeometry& g) {
  return g.channels * (g.height + 2 * g.padding) * col2im_row_stride(g) + kBlock;
}

void im2col_padded(const ConvGeometry& g, const float* image, float* scratch, float* cols) {
  check_stride_one(g);
#if defined(__AVX512F__)
  if (three_by_three_short_rows(g)) {
    im2col_three_by_three(g, image, cols);
    return;
  }
#endif
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t padded_w = g.width + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  // The padded copy: zero borders, the image inside; the slack after it is read by the last spill
  // of each row, never used.
  if (g.padding == 0) {
    // No border: the padded copy is the image itself, and only the slack needs defined values.
    const std::int64_t size = g.channels * g.height * g.width;
    std::memcpy(scratch, image, static_cast<std::size_t>(size) * sizeof(float));
    std::fill(scratch + size, scratch + size + kBlock, 0.0f);
  } else {
    std::fill(scratch, scratch + im2col_padded_scratch_size(g), 0.0f);
    for (std::int64_t c = 0; c < g.channels; ++c) {
      for (std::int64_t y = 0; y < g.height; ++y) {
        std::memcpy(scratch + (c * padded_h + y + g.padding) * padded_w + g.padding,
                    image + (c * g.height + y) * g.width,
                    static_cast<std::size_t>(g.width) * sizeof(float));
      }
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

#if defined(__AVX512F__)

// With AVX-512: for each channel c, kernel row i and output row oh, the padded row y = oh + i is
// loaded once as whole vectors, the KW cols rows (c, i, j) that land on it are added lane by lane
// (row j is loaded into the low lanes and permuted up to lanes j .. j + OW - 1), and the row is
// stored back. Each pixel still receives its contributions in (c, i, j) order, so the
// bits equal the portable version; what changes is that the portable one re-loads the row right
// after storing it one float to the left for the next j, a load the store cannot forward to.
void col2im_padded(const ConvGeometry& g, const float* cols, float* scratch, float* image) {
  check_stride_one(g);
  if (three_by_three_short_rows(g)) {
    col2im_three_by_three(g, cols, image);
    return;
  }
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t stride = col2im_row_stride(g);
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t pixels = oh_count * ow_count;
  // For vector v of a padded row (lanes x0 = 16 v ...) and kernel column j: lanes l with
  // 0 <= x0 + l - j < OW take cols row j at x0 + l - j; the hi - lo floats from there are loaded
  // into the low lanes and permuted up by lo. Fixed per call, so worked out once.
  struct Shift {
    __m512i up;
    __mmask16 count, take;
    std::int64_t at;  // into cols row (c, i, j), before adding the output row oh * OW
  };
  const std::int64_t vectors = stride / kBlock;
  std::vector<Shift> shifts(static_cast<std::size_t>(vectors * g.kernel_w));
  const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (std::int64_t v = 0; v < vectors; ++v) {
    for (std::int64_t j = 0; j < g.kernel_w; ++j) {
      const std::int64_t x0 = v * kBlock;
      const std::int64_t lo = std::max<std::int64_t>(j - x0, 0);
      const std::int64_t hi = std::clamp<std::int64_t>(j - x0 + ow_count, lo, kBlock);
      const auto count = static_cast<__mmask16>((1u << (hi - lo)) - 1u);
      shifts[static_cast<std::size_t>(v * g.kernel_w + j)] = {
          _mm512_sub_epi32(lanes, _mm512_set1_epi32(static_cast<std::int32_t>(lo))), count,
          static_cast<__mmask16>(count << lo), j * pixels + x0 + lo - j};
    }
  }
  std::fill(scratch, scratch + g.channels * padded_h * stride, 0.0f);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      const float* src_i = cols + (c * g.kernel_h + i) * g.kernel_w * pixels;
      for (std::int64_t oh = 0; oh < oh_count; ++oh) {
        float* dst = scratch + (c * padded_h + oh + i) * stride;
        const float* src = src_i + oh * ow_count;
        for (std::int64_t v = 0; v < vectors; ++v) {
          __m512 row = _mm512_loadu_ps(dst + v * kBlock);
          const Shift* shift = shifts.data() + v * g.kernel_w;
          for (std::int64_t j = 0; j < g.kernel_w; ++j) {
            const Shift& s = shift[j];
            if (s.count == 0) continue;  // column j does not reach this vector
            const __m512 moved = _mm512_maskz_permutexvar_ps(
                s.take, s.up, _mm512_maskz_loadu_ps(s.count, src + s.at));
            row = _mm512_mask_add_ps(row, s.take, row, moved);
          }
          _mm512_storeu_ps(dst + v * kBlock, row);
        }
      }
    }
  }
  // The interior, row by row in whole vectors: a vector past a row's end spills into the next image
  // rows, which are written after it; only a vector that would pass the image's end is masked.
  // Reads past a padded row stay inside scratch (the rows below it, or its 16 floats of slack).
  const std::int64_t image_rows = g.channels * g.height;
  const std::int64_t image_size = image_rows * g.width;
  for (std::int64_t row = 0; row < image_rows; ++row) {
    const float* in =
        scratch + ((row / g.height) * padded_h + row % g.height + g.padding) * stride + g.padding;
    float* out = image + row * g.width;
    for (std::int64_t x = 0; x < g.width; x += kBlock) {
      const __m512 v = _mm512_loadu_ps(in + x);
      if (row * g.width + x + kBlock <= image_size) {
        _mm512_storeu_ps(out + x, v);
      } else {
        const std::int64_t n = std::min(kBlock, g.width - x);
        _mm512_mask_storeu_ps(out + x, static_cast<__mmask16>((1u << n) - 1u), v);
      }
    }
  }
}

#else

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

#endif

}  // namespace dtrain::tensor
