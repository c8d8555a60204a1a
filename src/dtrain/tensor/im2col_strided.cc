#include "dtrain/tensor/im2col_strided.h"

#include <algorithm>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace dtrain::tensor {
namespace {

struct Phases {
  std::int64_t padded_h, padded_w, width;  // width: WQ, floats per phase row
  std::int64_t plane() const { return padded_h * width; }
};

Phases phases_of(const ConvGeometry& g) {
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t padded_w = g.width + 2 * g.padding;
  return {padded_h, padded_w, (padded_w + g.stride - 1) / g.stride};
}

// The columns q of phase p that hold image pixels: 0 <= q*S + p - P < W.
struct ColumnRange {
  std::int64_t begin, end;
};
ColumnRange columns(const ConvGeometry& g, const Phases& ph, std::int64_t p) {
  const std::int64_t begin = std::max<std::int64_t>(0, (g.padding - p + g.stride - 1) / g.stride);
  const std::int64_t end = std::clamp<std::int64_t>(
      (g.width + g.padding - p + g.stride - 1) / g.stride, begin, ph.width);
  return {begin, end};
}

// dst[0:n] = src[0:n] for short rows: one masked move per 16 floats with AVX-512.
inline void copy_row(const float* src, float* dst, std::int64_t n) {
#if defined(__AVX512F__)
  for (std::int64_t x = 0; x < n; x += 16) {
    const auto mask = static_cast<__mmask16>(n - x >= 16 ? 0xffffu : (1u << (n - x)) - 1u);
    _mm512_mask_storeu_ps(dst + x, mask, _mm512_maskz_loadu_ps(mask, src + x));
  }
#else
  for (std::int64_t x = 0; x < n; ++x) dst[x] = src[x];
#endif
}

// dst[0:n] += src[0:n], likewise.
inline void add_row(const float* src, float* dst, std::int64_t n) {
#if defined(__AVX512F__)
  for (std::int64_t x = 0; x < n; x += 16) {
    const auto mask = static_cast<__mmask16>(n - x >= 16 ? 0xffffu : (1u << (n - x)) - 1u);
    const __m512 sum =
        _mm512_add_ps(_mm512_maskz_loadu_ps(mask, dst + x), _mm512_maskz_loadu_ps(mask, src + x));
    _mm512_mask_storeu_ps(dst + x, mask, sum);
  }
#else
  for (std::int64_t x = 0; x < n; ++x) dst[x] += src[x];
#endif
}

#if defined(__AVX512F__)
// Stride 2 with AVX-512: an image row splits into its even and odd pixels 32 at a time with two
// permutes (scalar, the de-interleave took half of im2col_strided's time). Pixel x lands in phase
// (x + P) mod 2 at column (x + P) / 2: evens (x = 2k) in phase P mod 2 from column P / 2, odds in
// phase (P + 1) mod 2 from column (P + 1) / 2.
inline __mmask16 first(std::int64_t n) {
  return static_cast<__mmask16>(n >= 16 ? 0xffffu : (1u << n) - 1u);
}

void split_row_stride2(const float* in, std::int64_t width, std::int64_t padding, float* phase0,
                       float* phase1) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  float* evens = (padding % 2 == 0 ? phase0 : phase1) + padding / 2;
  float* odds = (padding % 2 == 0 ? phase1 : phase0) + (padding + 1) / 2;
  for (std::int64_t x = 0; x < width; x += 32) {
    const std::int64_t n = std::min<std::int64_t>(32, width - x);
    const __m512 a = _mm512_maskz_loadu_ps(first(n), in + x);
    const __m512 b = _mm512_maskz_loadu_ps(first(n - 16 > 0 ? n - 16 : 0), in + x + 16);
    _mm512_mask_storeu_ps(evens + x / 2, first((n + 1) / 2), _mm512_permutex2var_ps(a, even, b));
    _mm512_mask_storeu_ps(odds + x / 2, first(n / 2), _mm512_permutex2var_ps(a, odd, b));
  }
}

void merge_row_stride2(const float* phase0, const float* phase1, std::int64_t width,
                       std::int64_t padding, float* out) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const float* evens = (padding % 2 == 0 ? phase0 : phase1) + padding / 2;
  const float* odds = (padding % 2 == 0 ? phase1 : phase0) + (padding + 1) / 2;
  for (std::int64_t x = 0; x < width; x += 32) {
    const std::int64_t n = std::min<std::int64_t>(32, width - x);
    const __m512 e = _mm512_maskz_loadu_ps(first((n + 1) / 2), evens + x / 2);
    const __m512 o = _mm512_maskz_loadu_ps(first(n / 2), odds + x / 2);
    _mm512_mask_storeu_ps(out + x, first(n), _mm512_permutex2var_ps(e, lo, o));
    if (n > 16)
      _mm512_mask_storeu_ps(out + x + 16, first(n - 16), _mm512_permutex2var_ps(e, hi, o));
  }
}

// A 1x1 kernel with stride 2 and no padding (a ResNet's projection shortcut) reads only the even
// pixels of the even rows: cols[c, oh, ow] = image[c, 2 oh, 2 ow]. Gathered straight from those
// rows (one permute per 32 pixels), without filling and splitting the whole image into phase planes
// (which read every row and wrote twice the floats cols holds).
bool pointwise_stride2(const ConvGeometry& g) {
  return g.kernel_h == 1 && g.kernel_w == 1 && g.stride == 2 && g.padding == 0;
}

void im2col_pointwise_stride2(const ConvGeometry& g, const float* image, float* cols) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();  // ceil(W / 2)
  float* out = cols;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t oh = 0; oh < oh_count; ++oh, out += ow_count) {
      const float* in = image + (c * g.height + 2 * oh) * g.width;
      for (std::int64_t x = 0; x < g.width; x += 32) {
        const std::int64_t n = std::min<std::int64_t>(32, g.width - x);
        const __m512 a = _mm512_maskz_loadu_ps(first(n), in + x);
        const __m512 b = _mm512_maskz_loadu_ps(first(n - 16 > 0 ? n - 16 : 0), in + x + 16);
        _mm512_mask_storeu_ps(out + x / 2, first((n + 1) / 2), _mm512_permutex2var_ps(a, even, b));
      }
    }
  }
}

// The adjoint: image[c, y, x] = cols[c, y / 2, x / 2] for even y and x, 0 elsewhere. Each value has
// 0 added, as col2im's accumulation into zeros does (so -0 comes out +0, the same bits).
void col2im_pointwise_stride2(const ConvGeometry& g, const float* cols, float* image) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512 zero = _mm512_setzero_ps();
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      float* out = image + (c * g.height + y) * g.width;
      if (y % 2 != 0) {
        std::fill(out, out + g.width, 0.0f);
        continue;
      }
      const float* in = cols + (c * g.out_height() + y / 2) * ow_count;
      for (std::int64_t x = 0; x < g.width; x += 32) {
        const std::int64_t n = std::min<std::int64_t>(32, g.width - x);
        const __m512 e = _mm512_add_ps(_mm512_maskz_loadu_ps(first((n + 1) / 2), in + x / 2), zero);
        _mm512_mask_storeu_ps(out + x, first(n), _mm512_permutex2var_ps(e, lo, zero));
        if (n > 16) {
          _mm512_mask_storeu_ps(out + x + 16, first(n - 16), _mm512_permutex2var_ps(e, hi, zero));
        }
      }
    }
  }
}

// A 3x3 kernel with stride 2 and padding 1 on rows of at most 32 pixels (a ResNet's first layer of
// stages 2 and 3): each image row y = 2 oh + i - 1 is split once into its even and odd pixels (two
// permutes), and the three kernel columns are cols[(c, i, 0), oh, ow] = x[y, 2 ow - 1] (the odd
// pixels moved up one lane, 0 for ow = 0), cols[(c, i, 1), oh, ow] = x[y, 2 ow] (even) and
// cols[(c, i, 2), oh, ow] = x[y, 2 ow + 1] (odd; 0 past the row): no phase planes to fill, write
// and read back.
bool three_by_three_stride2(const ConvGeometry& g) {
  return g.kernel_h == 3 && g.kernel_w == 3 && g.stride == 2 && g.padding == 1 && g.width <= 32;
}

void im2col_three_by_three_stride2(const ConvGeometry& g, const float* image, float* cols) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512i up_one = _mm512_setr_epi32(0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14);
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();  // <= 16
  const std::int64_t plane = oh_count * ow_count;
  const __mmask16 out_mask = first(ow_count);
  const __mmask16 load_a = first(g.width), load_b = first(g.width > 16 ? g.width - 16 : 0);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < 3; ++i) {
      float* out = cols + (c * 3 + i) * 3 * plane;
      for (std::int64_t oh = 0; oh < oh_count; ++oh, out += ow_count) {
        const std::int64_t y = 2 * oh + i - 1;
        __m512 left = _mm512_setzero_ps(), mid = left, right = left;
        if (y >= 0 && y < g.height) {
          const float* row = image + (c * g.height + y) * g.width;
          const __m512 a = _mm512_maskz_loadu_ps(load_a, row);
          const __m512 b = _mm512_maskz_loadu_ps(load_b, row + 16);
          mid = _mm512_permutex2var_ps(a, even, b);
          right = _mm512_permutex2var_ps(a, odd, b);
          left = _mm512_maskz_permutexvar_ps(static_cast<__mmask16>(0xfffeu), up_one, right);
        }
        _mm512_mask_storeu_ps(out, out_mask, left);
        _mm512_mask_storeu_ps(out + plane, out_mask, mid);
        _mm512_mask_storeu_ps(out + 2 * plane, out_mask, right);
      }
    }
  }
}

// The adjoint, row by row: image row y sums, from 0 and in (i, j) order as col2im does (so the same
// bits), the cols rows (c, i, j) at oh = (y + 1 - i) / 2 for the i of y's parity: j = 1 into the
// even pixels, j = 0 (moved down one lane) and j = 2 into the odd ones; then the two halves are
// interleaved into the row.
void col2im_three_by_three_stride2(const ConvGeometry& g, const float* cols, float* image) {
  const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  const __m512i hi =
      _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
  const __m512i down_one = _mm512_setr_epi32(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0);
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();  // <= 16
  const std::int64_t plane = oh_count * ow_count;
  const __mmask16 in_mask = first(ow_count);
  const __mmask16 store_a = first(g.width), store_b = first(g.width > 16 ? g.width - 16 : 0);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      __m512 even = _mm512_setzero_ps(), odd = even;
      for (std::int64_t i = 0; i < 3; ++i) {
        if ((y + 1 - i) % 2 != 0) continue;
        const std::int64_t oh = (y + 1 - i) / 2;
        if (oh < 0 || oh >= oh_count) continue;
        const float* in = cols + (c * 3 + i) * 3 * plane + oh * ow_count;
        const __m512 left = _mm512_maskz_loadu_ps(in_mask, in);
        odd = _mm512_add_ps(
            odd, _mm512_maskz_permutexvar_ps(static_cast<__mmask16>(0x7fffu), down_one, left));
        even = _mm512_add_ps(even, _mm512_maskz_loadu_ps(in_mask, in + plane));
        odd = _mm512_add_ps(odd, _mm512_maskz_loadu_ps(in_mask, in + 2 * plane));
      }
      float* out = image + (c * g.height + y) * g.width;
      _mm512_mask_storeu_ps(out, store_a, _mm512_permutex2var_ps(even, lo, odd));
      _mm512_mask_storeu_ps(out + 16, store_b, _mm512_permutex2var_ps(even, hi, odd));
    }
  }
}
#endif

}  // namespace

std::int64_t im2col_strided_scratch_size(const ConvGeometry& g) {
  const Phases ph = phases_of(g);
  return g.stride * g.channels * ph.plane();
}

void im2col_strided(const ConvGeometry& g, const float* image, float* scratch, float* cols) {
#if defined(__AVX512F__)
  if (pointwise_stride2(g)) {
    im2col_pointwise_stride2(g, image, cols);
    return;
  }
  if (three_by_three_stride2(g)) {
    im2col_three_by_three_stride2(g, image, cols);
    return;
  }
#endif
  const Phases ph = phases_of(g);
  const std::int64_t s = g.stride;
  const std::int64_t phase_size = g.channels * ph.plane();
  std::fill(scratch, scratch + s * phase_size, 0.0f);
  // De-interleave: image pixel (c, y, x) is padded (c, y + P, x + P), phase (x + P) mod S,
  // column (x + P) / S.
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      const float* in = image + (c * g.height + y) * g.width;
      float* row = scratch + (c * ph.padded_h + y + g.padding) * ph.width;
#if defined(__AVX512F__)
      if (s == 2) {
        split_row_stride2(in, g.width, g.padding, row, row + phase_size);
        continue;
      }
#endif
      for (std::int64_t p = 0; p < s; ++p) {
        const ColumnRange r = columns(g, ph, p);
        float* dst = row + p * phase_size;
        for (std::int64_t q = r.begin; q < r.end; ++q) dst[q] = in[q * s + p - g.padding];
      }
    }
  }
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  float* out = cols;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t j = 0; j < g.kernel_w; ++j) {
        const float* src = scratch + j % s * phase_size + (c * ph.padded_h + i) * ph.width + j / s;
        for (std::int64_t oh = 0; oh < oh_count; ++oh, out += ow_count) {
          copy_row(src + oh * s * ph.width, out, ow_count);
        }
      }
    }
  }
}

void col2im_strided(const ConvGeometry& g, const float* cols, float* scratch, float* image) {
#if defined(__AVX512F__)
  if (pointwise_stride2(g)) {
    col2im_pointwise_stride2(g, cols, image);
    return;
  }
  if (three_by_three_stride2(g)) {
    col2im_three_by_three_stride2(g, cols, image);
    return;
  }
#endif
  const Phases ph = phases_of(g);
  const std::int64_t s = g.stride;
  const std::int64_t phase_size = g.channels * ph.plane();
  std::fill(scratch, scratch + s * phase_size, 0.0f);
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const float* in = cols;
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t j = 0; j < g.kernel_w; ++j) {
        float* dst = scratch + j % s * phase_size + (c * ph.padded_h + i) * ph.width + j / s;
        for (std::int64_t oh = 0; oh < oh_count; ++oh, in += ow_count) {
          add_row(in, dst + oh * s * ph.width, ow_count);
        }
      }
    }
  }
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      float* out = image + (c * g.height + y) * g.width;
      const float* row = scratch + (c * ph.padded_h + y + g.padding) * ph.width;
#if defined(__AVX512F__)
      if (s == 2) {
        merge_row_stride2(row, row + phase_size, g.width, g.padding, out);
        continue;
      }
#endif
      for (std::int64_t p = 0; p < s; ++p) {
        const ColumnRange r = columns(g, ph, p);
        const float* src = row + p * phase_size;
        for (std::int64_t q = r.begin; q < r.end; ++q) out[q * s + p - g.padding] = src[q];
      }
    }
  }
}

}  // namespace dtrain::tensor
