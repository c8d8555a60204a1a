#include "dtrain/tensor/conv_direct.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"

namespace dtrain::tensor {
namespace {

// Filters per forward step (2 x 6 accumulators), filters and shifts per weight-gradient step
// (3 x 5 accumulators, plus 6 dy and 2 image vectors: 23 of the 32 vector registers).
constexpr std::int64_t kForwardFilters = 6;
constexpr std::int64_t kGradFilters = 3;
constexpr std::int64_t kGradShifts = 5;
// Floats per row of a shifted copy (build_shifted): two vectors, 64-byte aligned.
constexpr std::int64_t kRow = 2 * kConvDirectLanes;

void check_supported(const ConvGeometry& g) {
  DTRAIN_CHECK(conv_direct_supported(g),
               "conv_direct needs AVX-512, stride 1 and 16 < OW <= 32, got stride {} and OW {}",
               g.stride, g.out_width());
}

}  // namespace

bool conv_direct_supported([[maybe_unused]] const ConvGeometry& g) {
#if defined(__AVX512F__)
  const std::int64_t ow_count = g.out_width();
  return g.stride == 1 && ow_count > kConvDirectLanes && ow_count <= 2 * kConvDirectLanes;
#else
  return false;
#endif
}

std::int64_t conv_direct_scratch_size(const ConvGeometry& g) {
  const std::int64_t padded_h = g.height + 2 * g.padding;
  return g.channels * padded_h * (g.kernel_w * kRow + g.width + 2 * g.padding) + kConvDirectLanes;
}

#if defined(__AVX512F__)
namespace {

// image (C, H, W) -> shifted (C, KW, H + 2P, kRow) at the first 64-byte boundary of scratch:
// shifted[c, j, r, col] = padded[c, r, col + j] for col < OW, 0 elsewhere, where padded (C, H + 2P,
// W + 2P) is the image with P zeros around it, built after shifted in scratch. Every row a kernel
// reads is then two aligned vectors, and lanes past OW hold zeros. Cost: C*(H + 2P)*(W + 2P)
// floats for padded, then 2 loads and 2 stores per shifted row: C*KW*(H + 2P)*kRow floats (20 KB
// for LeNet's conv1).
const float* build_shifted(const ConvGeometry& g, const float* image, float* scratch) {
  const auto address = reinterpret_cast<std::uintptr_t>(scratch);
  float* shifted = scratch + (64 - address % 64) % 64 / sizeof(float);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t padded_w = g.width + 2 * g.padding;
  float* padded = shifted + g.channels * g.kernel_w * padded_h * kRow;
  std::fill(padded, padded + g.channels * padded_h * padded_w, 0.0f);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t y = 0; y < g.height; ++y) {
      std::memcpy(padded + (c * padded_h + y + g.padding) * padded_w + g.padding,
                  image + (c * g.height + y) * g.width,
                  static_cast<std::size_t>(g.width) * sizeof(float));
    }
  }
  // Row r of shift j reads padded[c, r, j : j + OW]: j + OW <= W + 2P, so nothing past the row.
  const auto tail = static_cast<__mmask16>((1u << (g.out_width() - kConvDirectLanes)) - 1u);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t j = 0; j < g.kernel_w; ++j) {
      float* out = shifted + (c * g.kernel_w + j) * padded_h * kRow;
      const float* in = padded + c * padded_h * padded_w + j;
      for (std::int64_t r = 0; r < padded_h; ++r, out += kRow, in += padded_w) {
        _mm512_store_ps(out, _mm512_loadu_ps(in));
        _mm512_store_ps(out + kConvDirectLanes, _mm512_maskz_loadu_ps(tail, in + kConvDirectLanes));
      }
    }
  }
  return shifted;
}

// One tap of the forward pass for one filter: both halves of its output row += w * (xa, xb).
// The accumulators are named variables passed by reference (not arrays) so that they stay in
// registers once inlined.
inline void forward_tap(float w, __m512 xa, __m512 xb, __m512& lo, __m512& hi) {
  const __m512 wv = _mm512_set1_ps(w);
  lo = _mm512_fmadd_ps(wv, xa, lo);
  hi = _mm512_fmadd_ps(wv, xb, hi);
}

// One shift of the weight gradient for three filters: sum_k += dy_k . row shifted, both halves.
struct DyRows {
  __m512 a0, b0, a1, b1, a2, b2;  // the two halves of dy[f, oh, :] for three filters
};
inline void grad_shift(const float* x, const DyRows& dy, __m512& s0, __m512& s1, __m512& s2) {
  const __m512 xa = _mm512_load_ps(x);
  const __m512 xb = _mm512_load_ps(x + kConvDirectLanes);
  s0 = _mm512_fmadd_ps(dy.b0, xb, _mm512_fmadd_ps(dy.a0, xa, s0));
  s1 = _mm512_fmadd_ps(dy.b1, xb, _mm512_fmadd_ps(dy.a1, xa, s1));
  s2 = _mm512_fmadd_ps(dy.b2, xb, _mm512_fmadd_ps(dy.a2, xa, s2));
}

}  // namespace

void conv_direct_forward(const ConvGeometry& g, std::int64_t filters, const float* weight,
                         const float* bias, const float* image, float* scratch, float* y) {
  check_supported(g);
  const float* shifted = build_shifted(g, image, scratch);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t rows = g.col_rows();
  const auto tail = static_cast<__mmask16>((1u << (ow_count - kConvDirectLanes)) - 1u);
  for (std::int64_t f0 = 0; f0 < filters; f0 += kForwardFilters) {
    // A last group with fewer filters repeats the last one and stores only the real ones.
    const auto filter = [&](std::int64_t k) { return std::min(f0 + k, filters - 1); };
    const float* w0 = weight + filter(0) * rows;
    const float* w1 = weight + filter(1) * rows;
    const float* w2 = weight + filter(2) * rows;
    const float* w3 = weight + filter(3) * rows;
    const float* w4 = weight + filter(4) * rows;
    const float* w5 = weight + filter(5) * rows;
    const auto start = [&](std::int64_t k) {
      return _mm512_set1_ps(bias != nullptr ? bias[filter(k)] : 0.0f);
    };
    for (std::int64_t oh = 0; oh < oh_count; ++oh) {
      __m512 lo0 = start(0), lo1 = start(1), lo2 = start(2), lo3 = start(3), lo4 = start(4),
             lo5 = start(5);
      __m512 hi0 = lo0, hi1 = lo1, hi2 = lo2, hi3 = lo3, hi4 = lo4, hi5 = lo5;
      for (std::int64_t c = 0; c < g.channels; ++c) {
        for (std::int64_t i = 0; i < g.kernel_h; ++i) {
          const std::int64_t tap = (c * g.kernel_h + i) * g.kernel_w;
          for (std::int64_t j = 0; j < g.kernel_w; ++j) {
            const float* row = shifted + ((c * g.kernel_w + j) * padded_h + oh + i) * kRow;
            const __m512 xa = _mm512_load_ps(row);
            const __m512 xb = _mm512_load_ps(row + kConvDirectLanes);
            const std::int64_t t = tap + j;
            forward_tap(w0[t], xa, xb, lo0, hi0);
            forward_tap(w1[t], xa, xb, lo1, hi1);
            forward_tap(w2[t], xa, xb, lo2, hi2);
            forward_tap(w3[t], xa, xb, lo3, hi3);
            forward_tap(w4[t], xa, xb, lo4, hi4);
            forward_tap(w5[t], xa, xb, lo5, hi5);
          }
        }
      }
      const __m512 lo[kForwardFilters] = {lo0, lo1, lo2, lo3, lo4, lo5};
      const __m512 hi[kForwardFilters] = {hi0, hi1, hi2, hi3, hi4, hi5};
      const std::int64_t live = std::min(kForwardFilters, filters - f0);
      for (std::int64_t k = 0; k < live; ++k) {
        float* out = y + (f0 + k) * oh_count * ow_count + oh * ow_count;
        _mm512_storeu_ps(out, lo[k]);
        _mm512_mask_storeu_ps(out + kConvDirectLanes, tail, hi[k]);
      }
    }
  }
}

void conv_direct_weight_grad(const ConvGeometry& g, std::int64_t filters, const float* dy,
                             const float* image, float* scratch, float* lanes) {
  check_supported(g);
  const float* shifted = build_shifted(g, image, scratch);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t plane = oh_count * ow_count;
  const auto tail = static_cast<__mmask16>((1u << (ow_count - kConvDirectLanes)) - 1u);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t f0 = 0; f0 < filters; f0 += kGradFilters) {
        // Short groups repeat the last filter or shift and keep only the real sums.
        const float* dy0 = dy + std::min(f0, filters - 1) * plane;
        const float* dy1 = dy + std::min(f0 + 1, filters - 1) * plane;
        const float* dy2 = dy + std::min(f0 + 2, filters - 1) * plane;
        for (std::int64_t j0 = 0; j0 < g.kernel_w; j0 += kGradShifts) {
          const auto shift = [&](std::int64_t s) { return std::min(j0 + s, g.kernel_w - 1); };
          const std::int64_t j1 = shift(1), j2 = shift(2), j3 = shift(3), j4 = shift(4);
          const __m512 zero = _mm512_setzero_ps();
          __m512 s00 = zero, s01 = zero, s02 = zero, s03 = zero, s04 = zero;
          __m512 s10 = zero, s11 = zero, s12 = zero, s13 = zero, s14 = zero;
          __m512 s20 = zero, s21 = zero, s22 = zero, s23 = zero, s24 = zero;
          for (std::int64_t oh = 0; oh < oh_count; ++oh) {
            const std::int64_t at = oh * ow_count;
            const DyRows rows{_mm512_loadu_ps(dy0 + at),
                              _mm512_maskz_loadu_ps(tail, dy0 + at + kConvDirectLanes),
                              _mm512_loadu_ps(dy1 + at),
                              _mm512_maskz_loadu_ps(tail, dy1 + at + kConvDirectLanes),
                              _mm512_loadu_ps(dy2 + at),
                              _mm512_maskz_loadu_ps(tail, dy2 + at + kConvDirectLanes)};
            const float* row = shifted + (c * g.kernel_w * padded_h + oh + i) * kRow;
            const std::int64_t step = padded_h * kRow;  // from one shift's copy to the next
            grad_shift(row + j0 * step, rows, s00, s10, s20);
            grad_shift(row + j1 * step, rows, s01, s11, s21);
            grad_shift(row + j2 * step, rows, s02, s12, s22);
            grad_shift(row + j3 * step, rows, s03, s13, s23);
            grad_shift(row + j4 * step, rows, s04, s14, s24);
          }
          const __m512 sums[kGradFilters][kGradShifts] = {
              {s00, s01, s02, s03, s04}, {s10, s11, s12, s13, s14}, {s20, s21, s22, s23, s24}};
          const std::int64_t live_f = std::min(kGradFilters, filters - f0);
          const std::int64_t live_s = std::min(kGradShifts, g.kernel_w - j0);
          for (std::int64_t k = 0; k < live_f; ++k) {
            for (std::int64_t s = 0; s < live_s; ++s) {
              const std::int64_t tap =
                  (((f0 + k) * g.channels + c) * g.kernel_h + i) * g.kernel_w + j0 + s;
              float* sum = lanes + tap * kConvDirectLanes;
              _mm512_storeu_ps(sum, _mm512_add_ps(_mm512_loadu_ps(sum), sums[k][s]));
            }
          }
        }
      }
    }
  }
}

#else

void conv_direct_forward(const ConvGeometry& g, std::int64_t, const float*, const float*,
                         const float*, float*, float*) {
  check_supported(g);
}

void conv_direct_weight_grad(const ConvGeometry& g, std::int64_t, const float*, const float*,
                             float*, float*) {
  check_supported(g);
}

#endif

void conv_direct_reduce_lanes(std::int64_t count, const float* lanes, float* dw) {
  for (std::int64_t k = 0; k < count; ++k) {
    float tree[kConvDirectLanes];
    std::copy(lanes + k * kConvDirectLanes, lanes + (k + 1) * kConvDirectLanes, tree);
    for (std::int64_t width = kConvDirectLanes / 2; width > 0; width /= 2) {
      for (std::int64_t l = 0; l < width; ++l) tree[l] += tree[l + width];
    }
    dw[k] += tree[0];
  }
}

}  // namespace dtrain::tensor
