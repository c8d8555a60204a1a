#include "dtrain/tensor/conv_direct.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"

namespace dtrain::tensor {
namespace {

// Filters per forward step: 8 (16 accumulators) when the filter count is a multiple of 8 (ResNet's
// 16, 32, 64; the input gradient of a 16-channel layer), else 6 (12 accumulators: LeNet's 6).
// Filters and shifts per weight-gradient step: 3 x 5 for kernels 5 wide (LeNet), 4 x 3 for kernels
// 3 wide (ResNet: 3 x 5 would compute two clamped, discarded shifts out of five); 12 or 15
// accumulators plus 6 or 8 dy and 2 image vectors: at most 27 of the 32 vector registers.
constexpr int kForwardFiltersWide = 8;
constexpr int kForwardFilters = 6;
constexpr int kGradFilters = 3;
constexpr int kGradShifts = 5;
constexpr int kGradFilters3 = 4;
constexpr int kGradShifts3 = 3;
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
  // The shifted copies, and up to 15 floats to reach a 64-byte boundary.
  return g.channels * padded_h * g.kernel_w * kRow + kConvDirectLanes;
}

#if defined(__AVX512F__)
namespace {

// image (C, H, W) -> shifted (C, KW, H + 2P, kRow) at the first 64-byte boundary of scratch:
// shifted[c, j, r, col] = padded[c, r, col + j] for col < OW, 0 elsewhere, where padded (C, H + 2P,
// W + 2P) is the image with P zeros around it. Every row a kernel reads is then two aligned
// vectors, and lanes past OW hold zeros. Each shifted row is two masked loads straight from the
// image row r - P, starting at column j - P: the lanes whose column falls outside the image (or
// past OW) are masked off, read nothing and come out 0, so no padded copy is built (it and its
// row-by-row memcpy were a third of this function's time). Cost: 2 loads and 2 stores per shifted
// row, C*KW*(H + 2P)*kRow floats (20 KB for LeNet's conv1).
const float* build_shifted(const ConvGeometry& g, const float* image, float* scratch) {
  const auto address = reinterpret_cast<std::uintptr_t>(scratch);
  float* shifted = scratch + (64 - address % 64) % 64 / sizeof(float);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t ow_count = g.out_width();
  for (std::int64_t j = 0; j < g.kernel_w; ++j) {
    // Lane l of the row reads image column x = l + j - P: valid for 0 <= x < W and l < OW.
    const std::int64_t offset = j - g.padding;
    std::uint32_t valid = 0;
    for (std::int64_t l = 0; l < 2 * kConvDirectLanes; ++l) {
      if (l < ow_count && l + offset >= 0 && l + offset < g.width) valid |= 1u << l;
    }
    const auto mask_a = static_cast<__mmask16>(valid & 0xffffu);
    const auto mask_b = static_cast<__mmask16>(valid >> 16);
    for (std::int64_t c = 0; c < g.channels; ++c) {
      float* out = shifted + (c * g.kernel_w + j) * padded_h * kRow;
      for (std::int64_t r = 0; r < padded_h; ++r, out += kRow) {
        const std::int64_t y = r - g.padding;
        if (y < 0 || y >= g.height) {
          _mm512_store_ps(out, _mm512_setzero_ps());
          _mm512_store_ps(out + kConvDirectLanes, _mm512_setzero_ps());
          continue;
        }
        // The row's start shifted by offset, as an address: lanes before the row are masked off.
        const auto row = reinterpret_cast<std::uintptr_t>(image + (c * g.height + y) * g.width);
        const auto* from = reinterpret_cast<const float*>(
            row + static_cast<std::uintptr_t>(offset * static_cast<std::int64_t>(sizeof(float))));
        _mm512_store_ps(out, _mm512_maskz_loadu_ps(mask_a, from));
        _mm512_store_ps(out + kConvDirectLanes,
                        _mm512_maskz_loadu_ps(mask_b, from + kConvDirectLanes));
      }
    }
  }
  return shifted;
}

// One tap of the forward pass for one filter: both halves of its output row += w * (xa, xb).
// The accumulators are named variables passed by reference (not arrays) so that they stay in
// registers once inlined (with arrays GCC 12 kept xa and xb on the stack and re-read them for every
// FMA, 2x slower).
[[gnu::always_inline]] inline void forward_tap(float w, __m512 xa, __m512 xb, __m512& lo,
                                               __m512& hi) {
  const __m512 wv = _mm512_set1_ps(w);
  lo = _mm512_fmadd_ps(wv, xa, lo);
  hi = _mm512_fmadd_ps(wv, xb, hi);
}

// The register block of both forward kernels (forward_rows, forward_flat): filters f0 to
// f0 + NF - 1 (a last group with fewer filters repeats the last one and stores only the real ones)
// over one block of 32 output pixels, NF x 2 named accumulators (the block's two vectors per
// filter; with NF = 6 those of filters 6 and 7 are never touched and the compiler drops them).
// The kernels differ only in how they address the input, passed in as three callables, all
// inlined here so that the accumulators stay in registers:
//   start(f, high)       filter f's starting value of its low or high vector (bias, addend)
//   for_each_tap(tap)    calls tap(t, xa, xb) for every tap in (c, i, j) order: the input's two
//                        vectors xa, xb under weight t of each filter (t = (c * KH + i) * KW + j)
//   store(f, lo, hi)     writes filter f's two vectors
template <int NF, typename Start, typename ForEachTap, typename Store>
[[gnu::always_inline]] inline void forward_block(std::int64_t filters, std::int64_t f0,
                                                 const float* weight, std::int64_t rows,
                                                 const Start& start, const ForEachTap& for_each_tap,
                                                 const Store& store) {
  static_assert(NF == 6 || NF == 8);
  const auto filter = [&](std::int64_t k) { return std::min(f0 + k, filters - 1); };
  const float* w0 = weight + filter(0) * rows;
  const float* w1 = weight + filter(1) * rows;
  const float* w2 = weight + filter(2) * rows;
  const float* w3 = weight + filter(3) * rows;
  const float* w4 = weight + filter(4) * rows;
  const float* w5 = weight + filter(5) * rows;
  const float* w6 = weight + filter(6) * rows;
  const float* w7 = weight + filter(7) * rows;
  __m512 lo0 = start(filter(0), false), lo1 = start(filter(1), false),
         lo2 = start(filter(2), false), lo3 = start(filter(3), false),
         lo4 = start(filter(4), false), lo5 = start(filter(5), false),
         lo6 = start(filter(6), false), lo7 = start(filter(7), false);
  __m512 hi0 = start(filter(0), true), hi1 = start(filter(1), true), hi2 = start(filter(2), true),
         hi3 = start(filter(3), true), hi4 = start(filter(4), true), hi5 = start(filter(5), true),
         hi6 = start(filter(6), true), hi7 = start(filter(7), true);
  for_each_tap([&](std::int64_t t, __m512 xa, __m512 xb) __attribute__((always_inline)) {
    forward_tap(w0[t], xa, xb, lo0, hi0);
    forward_tap(w1[t], xa, xb, lo1, hi1);
    forward_tap(w2[t], xa, xb, lo2, hi2);
    forward_tap(w3[t], xa, xb, lo3, hi3);
    forward_tap(w4[t], xa, xb, lo4, hi4);
    forward_tap(w5[t], xa, xb, lo5, hi5);
    if constexpr (NF == 8) {
      forward_tap(w6[t], xa, xb, lo6, hi6);
      forward_tap(w7[t], xa, xb, lo7, hi7);
    }
  });
  const __m512 lo[8] = {lo0, lo1, lo2, lo3, lo4, lo5, lo6, lo7};
  const __m512 hi[8] = {hi0, hi1, hi2, hi3, hi4, hi5, hi6, hi7};
  const std::int64_t live = std::min<std::int64_t>(NF, filters - f0);
  for (std::int64_t k = 0; k < live; ++k) store(f0 + k, lo[k], hi[k]);
}

// The forward pass over an already shifted image, NF (6 or 8) filters at a time: for each output
// row, NF x 2 accumulators (the two halves of the row) take one broadcast weight per filter and
// tap (forward_block). addend (F, OH, OW), when not null, is the accumulators' starting value
// (plus bias).
template <int NF>
void forward_rows(const ConvGeometry& g, std::int64_t filters, const float* weight,
                  const float* bias, const float* addend, const float* shifted, float* y) {
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t rows = g.col_rows();
  const auto tail = static_cast<__mmask16>((1u << (ow_count - kConvDirectLanes)) - 1u);
  for (std::int64_t f0 = 0; f0 < filters; f0 += NF) {
    for (std::int64_t oh = 0; oh < oh_count; ++oh) {
      const auto start = [&](std::int64_t f, bool high) __attribute__((always_inline)) {
        const __m512 b = _mm512_set1_ps(bias != nullptr ? bias[f] : 0.0f);
        if (addend == nullptr) return b;
        const float* from = addend + f * oh_count * ow_count + oh * ow_count;
        const __m512 a =
            high ? _mm512_maskz_loadu_ps(tail, from + kConvDirectLanes) : _mm512_loadu_ps(from);
        return bias != nullptr ? _mm512_add_ps(b, a) : a;
      };
      const auto for_each_tap = [&](const auto& tap) __attribute__((always_inline)) {
        for (std::int64_t c = 0; c < g.channels; ++c) {
          for (std::int64_t i = 0; i < g.kernel_h; ++i) {
            const std::int64_t t0 = (c * g.kernel_h + i) * g.kernel_w;
            for (std::int64_t j = 0; j < g.kernel_w; ++j) {
              const float* row = shifted + ((c * g.kernel_w + j) * padded_h + oh + i) * kRow;
              tap(t0 + j, _mm512_load_ps(row), _mm512_load_ps(row + kConvDirectLanes));
            }
          }
        }
      };
      const auto store = [&](std::int64_t f, __m512 lo, __m512 hi) __attribute__((always_inline)) {
        float* out = y + f * oh_count * ow_count + oh * ow_count;
        _mm512_storeu_ps(out, lo);
        _mm512_mask_storeu_ps(out + kConvDirectLanes, tail, hi);
      };
      forward_block<NF>(filters, f0, weight, rows, start, for_each_tap, store);
    }
  }
}

// forward_flat's tap offsets and load masks for a geometry: offset[t] = (i - P) * W + j - P for
// tap t = i * KW + j; for the 16 pixels of vector v (pixels 16 v to 16 v + 15), masks[v * taps + t]
// has bit l set when pixel 16 v + l exists and its input pixel of tap t lies inside the image.
// Built once per thread and geometry (the divisions, 2 per pixel, made a 28x28 image's forward
// 12% slower when done per call) and reused while the geometry stays.
struct FlatMasks {
  std::int64_t height = -1, width = -1, kernel_h = -1, kernel_w = -1, padding = -1;
  std::vector<std::int64_t> offset;
  std::vector<__mmask16> lo;  // per vector of 16 pixels (one more, all zero, past an odd count)
};

const FlatMasks& flat_masks(const ConvGeometry& g) {
  thread_local FlatMasks cache;
  if (cache.height == g.height && cache.width == g.width && cache.kernel_h == g.kernel_h &&
      cache.kernel_w == g.kernel_w && cache.padding == g.padding) {
    return cache;
  }
  const std::int64_t pixels = g.height * g.width;
  const std::int64_t taps = g.kernel_h * g.kernel_w;
  // Whole pairs of vectors: the last pair's second vector may lie past the pixels.
  const std::int64_t vectors = (pixels + 2 * kConvDirectLanes - 1) / (2 * kConvDirectLanes) * 2;
  cache.offset.assign(static_cast<std::size_t>(taps), 0);
  cache.lo.assign(static_cast<std::size_t>(vectors * taps), 0);
  for (std::int64_t i = 0; i < g.kernel_h; ++i) {
    for (std::int64_t j = 0; j < g.kernel_w; ++j) {
      cache.offset[static_cast<std::size_t>(i * g.kernel_w + j)] =
          (i - g.padding) * g.width + j - g.padding;
    }
  }
  for (std::int64_t p = 0; p < pixels; ++p) {
    const std::int64_t oh = p / g.width, ow = p % g.width;
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      const std::int64_t r = oh + i - g.padding;
      if (r < 0 || r >= g.height) continue;
      for (std::int64_t j = 0; j < g.kernel_w; ++j) {
        const std::int64_t col = ow + j - g.padding;
        if (col < 0 || col >= g.width) continue;
        auto& m =
            cache.lo[static_cast<std::size_t>(p / kConvDirectLanes * taps + i * g.kernel_w + j)];
        m = static_cast<__mmask16>(m | (1u << static_cast<unsigned>(p % kConvDirectLanes)));
      }
    }
  }
  cache.height = g.height;
  cache.width = g.width;
  cache.kernel_h = g.kernel_h;
  cache.kernel_w = g.kernel_w;
  cache.padding = g.padding;
  return cache;
}

// The forward pass of a "same" convolution (OH = H and OW = W: 2P = KH - 1 = KW - 1, as ResNet's
// 3x3 layers with padding 1) over the image's planes as flat rows of
// H*W pixels, 32 pixels (two vectors) at a time whatever row they are in, NF filters at a time:
// output pixel p = oh * W + ow takes tap (c, i, j) from flat input pixel p + (i - P) * W + j - P,
// so a tap is two masked loads at one offset for all 32 pixels; the mask of tap (i, j) switches off
// the lanes whose input row oh + i - P or column ow + j - P falls in the padding (and those past
// H*W). forward_rows instead takes one output row as two vectors: 28 pixels in 32 lanes, 12.5% of
// its FMAs wasted at 28x28; here 784 pixels take 25 pairs of vectors (2% wasted). The sums run
// over (c, i, j) in the same order as forward_rows and the naive twin; a masked tap adds w * 0.
template <int NF>
void forward_flat(const ConvGeometry& g, std::int64_t filters, const float* weight,
                  const float* bias, const float* addend, const float* image, float* y) {
  const std::int64_t pixels = g.height * g.width;  // = OH * OW
  const std::int64_t rows = g.col_rows();
  const std::int64_t taps = g.kernel_h * g.kernel_w;
  const auto byte_offset = [](std::int64_t floats) {
    return static_cast<std::uintptr_t>(floats * static_cast<std::int64_t>(sizeof(float)));
  };
  const FlatMasks& masks = flat_masks(g);
  for (std::int64_t p0 = 0; p0 < pixels; p0 += 2 * kConvDirectLanes) {
    const __mmask16* mask_lo = masks.lo.data() + p0 / kConvDirectLanes * taps;
    const __mmask16* mask_hi = mask_lo + taps;
    const std::int64_t* offset = masks.offset.data();
    const std::int64_t live = std::min<std::int64_t>(2 * kConvDirectLanes, pixels - p0);
    const auto store_lo = static_cast<__mmask16>(
        live >= kConvDirectLanes ? 0xffffu : (1u << static_cast<unsigned>(live)) - 1u);
    const auto store_hi = static_cast<__mmask16>(
        live <= kConvDirectLanes
            ? 0u
            : (std::uint64_t{1} << static_cast<unsigned>(live - kConvDirectLanes)) - 1u);
    const auto start = [&](std::int64_t f, bool high) __attribute__((always_inline)) {
      const __m512 b = _mm512_set1_ps(bias != nullptr ? bias[f] : 0.0f);
      if (addend == nullptr) return b;
      const float* from = addend + f * pixels + p0;
      const __m512 a = high ? _mm512_maskz_loadu_ps(store_hi, from + kConvDirectLanes)
                            : _mm512_maskz_loadu_ps(store_lo, from);
      return bias != nullptr ? _mm512_add_ps(b, a) : a;
    };
    const auto for_each_tap = [&](const auto& tap) __attribute__((always_inline)) {
      for (std::int64_t c = 0; c < g.channels; ++c) {
        const auto base = reinterpret_cast<std::uintptr_t>(image + c * pixels + p0);
        for (std::int64_t t = 0; t < taps; ++t) {
          // The lanes before the image or past it are masked off: they read nothing.
          const auto* from = reinterpret_cast<const float*>(base + byte_offset(offset[t]));
          tap(c * taps + t, _mm512_maskz_loadu_ps(mask_lo[t], from),
              _mm512_maskz_loadu_ps(mask_hi[t], from + kConvDirectLanes));
        }
      }
    };
    const auto store = [&](std::int64_t f, __m512 lo, __m512 hi) __attribute__((always_inline)) {
      float* out = y + f * pixels + p0;
      _mm512_mask_storeu_ps(out, store_lo, lo);
      _mm512_mask_storeu_ps(out + kConvDirectLanes, store_hi, hi);
    };
    for (std::int64_t f0 = 0; f0 < filters; f0 += NF) {
      forward_block<NF>(filters, f0, weight, rows, start, for_each_tap, store);
    }
  }
}

// The weight gradient over an already shifted image, NF filters x NS shifts j at a time: for each
// output row, the NF dy rows (two halves each) are loaded once and multiplied into NS shifted
// image rows, NF x NS accumulators of 16 lanes.
template <int NF, int NS>
void weight_grad_rows(const ConvGeometry& g, std::int64_t filters, const float* dy,
                      const float* shifted, float* lanes) {
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t plane = oh_count * ow_count;
  const std::int64_t step = padded_h * kRow;  // from one shift's copy to the next
  const auto tail = static_cast<__mmask16>((1u << (ow_count - kConvDirectLanes)) - 1u);
  for (std::int64_t c = 0; c < g.channels; ++c) {
    for (std::int64_t i = 0; i < g.kernel_h; ++i) {
      for (std::int64_t f0 = 0; f0 < filters; f0 += NF) {
        // Short groups repeat the last filter or shift and keep only the real sums.
        const float* dyf[NF];
#pragma GCC unroll 16
        for (int k = 0; k < NF; ++k) {
          dyf[k] = dy + std::min<std::int64_t>(f0 + k, filters - 1) * plane;
        }
        for (std::int64_t j0 = 0; j0 < g.kernel_w; j0 += NS) {
          std::int64_t shift_offset[NS];
#pragma GCC unroll 16
          for (int s = 0; s < NS; ++s) {
            shift_offset[s] = std::min<std::int64_t>(j0 + s, g.kernel_w - 1) * step;
          }
          __m512 sum[NF][NS];
#pragma GCC unroll 16
          for (int k = 0; k < NF; ++k) {
#pragma GCC unroll 16
            for (int s = 0; s < NS; ++s) sum[k][s] = _mm512_setzero_ps();
          }
          for (std::int64_t oh = 0; oh < oh_count; ++oh) {
            const std::int64_t at = oh * ow_count;
            __m512 da[NF], db[NF];
#pragma GCC unroll 16
            for (int k = 0; k < NF; ++k) {
              da[k] = _mm512_loadu_ps(dyf[k] + at);
              db[k] = _mm512_maskz_loadu_ps(tail, dyf[k] + at + kConvDirectLanes);
              __asm__("" : "+v"(da[k]), "+v"(db[k]));  // likewise: loaded once, used NS times
            }
            const float* row = shifted + (c * g.kernel_w * padded_h + oh + i) * kRow;
#pragma GCC unroll 16
            for (int s = 0; s < NS; ++s) {
              __m512 xa = _mm512_load_ps(row + shift_offset[s]);
              __m512 xb = _mm512_load_ps(row + shift_offset[s] + kConvDirectLanes);
              // Keeps xa and xb in registers: GCC 12 otherwise folds the loads into each of the NF
              // FMAs that use them, 4x the loads, and the kernel ran at half the forward's rate.
              __asm__("" : "+v"(xa), "+v"(xb));
#pragma GCC unroll 16
              for (int k = 0; k < NF; ++k) {
                sum[k][s] = _mm512_fmadd_ps(db[k], xb, _mm512_fmadd_ps(da[k], xa, sum[k][s]));
              }
            }
          }
          const std::int64_t live_f = std::min<std::int64_t>(NF, filters - f0);
          const std::int64_t live_s = std::min<std::int64_t>(NS, g.kernel_w - j0);
#pragma GCC unroll 16
          for (int k = 0; k < NF; ++k) {
#pragma GCC unroll 16
            for (int s = 0; s < NS; ++s) {
              if (k >= live_f || s >= live_s) continue;
              const std::int64_t tap =
                  (((f0 + k) * g.channels + c) * g.kernel_h + i) * g.kernel_w + j0 + s;
              float* out = lanes + tap * kConvDirectLanes;
              _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), sum[k][s]));
            }
          }
        }
      }
    }
  }
}

// weight_grad_rows<4, 3> with every vector a named variable: the generic template keeps its dy
// vectors in arrays, and GCC 12 stored all eight to the stack on every output row (dead, cache-line
// split stores: the kernel ran at 30 GFLOP/s, a third of the forward's rate, at ResNet's stage 1).
// Same sums in the same order as the template, so the same bits.
inline void grad_tap(__m512 da, __m512 db, __m512 xa, __m512 xb, __m512& sum) {
  sum = _mm512_fmadd_ps(db, xb, _mm512_fmadd_ps(da, xa, sum));
}

void weight_grad_rows_4x3(const ConvGeometry& g, std::int64_t filters, const float* dy,
                          const float* shifted, float* lanes) {
  static_assert(kGradFilters3 == 4 && kGradShifts3 == 3);
  const std::int64_t padded_h = g.height + 2 * g.padding;
  const std::int64_t oh_count = g.out_height();
  const std::int64_t ow_count = g.out_width();
  const std::int64_t plane = oh_count * ow_count;
  const std::int64_t step = padded_h * kRow;
  const auto tail = static_cast<__mmask16>((1u << (ow_count - kConvDirectLanes)) - 1u);
  // The group's four dy planes copied to aligned rows of kRow floats (zero past OW): a dy row at
  // oh * OW floats is not 64-byte aligned, and the eight loads per output row, each split across
  // two cache lines, cost as much as the 24 FMAs. 4 * OH * 32 floats, at most 16 KB (OH <= 32).
  alignas(64) float rows_dy[4 * 2 * kConvDirectLanes * 2 * kConvDirectLanes];
  DTRAIN_CHECK(oh_count <= 2 * kConvDirectLanes, "conv_direct: OH {} > 32", oh_count);
  for (std::int64_t f0 = 0; f0 < filters; f0 += 4) {
    for (std::int64_t k = 0; k < 4; ++k) {
      // Short groups repeat the last filter and keep only the real sums.
      const float* from = dy + std::min<std::int64_t>(f0 + k, filters - 1) * plane;
      for (std::int64_t oh = 0; oh < oh_count; ++oh) {
        float* to = rows_dy + (k * oh_count + oh) * kRow;
        _mm512_store_ps(to, _mm512_loadu_ps(from + oh * ow_count));
        _mm512_store_ps(to + kConvDirectLanes,
                        _mm512_maskz_loadu_ps(tail, from + oh * ow_count + kConvDirectLanes));
      }
    }
    const std::int64_t group = oh_count * kRow;
    for (std::int64_t c = 0; c < g.channels; ++c) {
      for (std::int64_t i = 0; i < g.kernel_h; ++i) {
        __m512 s00 = _mm512_setzero_ps(), s01 = s00, s02 = s00, s10 = s00, s11 = s00, s12 = s00,
               s20 = s00, s21 = s00, s22 = s00, s30 = s00, s31 = s00, s32 = s00;
        const float* row = shifted + (c * g.kernel_w * padded_h + i) * kRow;
        const float* d = rows_dy;
        for (std::int64_t oh = 0; oh < oh_count; ++oh, row += kRow, d += kRow) {
          __m512 d0a = _mm512_load_ps(d);
          __m512 d0b = _mm512_load_ps(d + kConvDirectLanes);
          __m512 d1a = _mm512_load_ps(d + group);
          __m512 d1b = _mm512_load_ps(d + group + kConvDirectLanes);
          __m512 d2a = _mm512_load_ps(d + 2 * group);
          __m512 d2b = _mm512_load_ps(d + 2 * group + kConvDirectLanes);
          __m512 d3a = _mm512_load_ps(d + 3 * group);
          __m512 d3b = _mm512_load_ps(d + 3 * group + kConvDirectLanes);
          // Loaded once, used three times (GCC would fold the loads into each FMA otherwise).
          __asm__("" : "+v"(d0a), "+v"(d0b), "+v"(d1a), "+v"(d1b));
          __asm__("" : "+v"(d2a), "+v"(d2b), "+v"(d3a), "+v"(d3b));
          __m512 xa = _mm512_load_ps(row);
          __m512 xb = _mm512_load_ps(row + kConvDirectLanes);
          __asm__("" : "+v"(xa), "+v"(xb));
          grad_tap(d0a, d0b, xa, xb, s00);
          grad_tap(d1a, d1b, xa, xb, s10);
          grad_tap(d2a, d2b, xa, xb, s20);
          grad_tap(d3a, d3b, xa, xb, s30);
          xa = _mm512_load_ps(row + step);
          xb = _mm512_load_ps(row + step + kConvDirectLanes);
          __asm__("" : "+v"(xa), "+v"(xb));
          grad_tap(d0a, d0b, xa, xb, s01);
          grad_tap(d1a, d1b, xa, xb, s11);
          grad_tap(d2a, d2b, xa, xb, s21);
          grad_tap(d3a, d3b, xa, xb, s31);
          xa = _mm512_load_ps(row + 2 * step);
          xb = _mm512_load_ps(row + 2 * step + kConvDirectLanes);
          __asm__("" : "+v"(xa), "+v"(xb));
          grad_tap(d0a, d0b, xa, xb, s02);
          grad_tap(d1a, d1b, xa, xb, s12);
          grad_tap(d2a, d2b, xa, xb, s22);
          grad_tap(d3a, d3b, xa, xb, s32);
        }
        const __m512 sums[4][3] = {
            {s00, s01, s02}, {s10, s11, s12}, {s20, s21, s22}, {s30, s31, s32}};
        const std::int64_t live_f = std::min<std::int64_t>(4, filters - f0);
        for (std::int64_t k = 0; k < live_f; ++k) {
          for (std::int64_t s = 0; s < 3; ++s) {
            const std::int64_t tap = (((f0 + k) * g.channels + c) * g.kernel_h + i) * 3 + s;
            float* out = lanes + tap * kConvDirectLanes;
            _mm512_storeu_ps(out, _mm512_add_ps(_mm512_loadu_ps(out), sums[k][s]));
          }
        }
      }
    }
  }
}

}  // namespace

void conv_direct_forward(const ConvGeometry& g, std::int64_t filters, const float* weight,
                         const float* bias, const float* image, float* scratch, float* y,
                         const float* addend) {
  check_supported(g);
  // The flat kernel where it pays: "same" convolutions with filters in groups of 8 (ResNet's). With
  // 6 filters a step (LeNet's conv1: one channel, 12 FMAs per tap) its two mask loads per tap
  // weigh more, and the row kernel over aligned shifted copies stays.
  if (g.out_height() == g.height && g.out_width() == g.width &&
      filters % kForwardFiltersWide == 0) {
    forward_flat<kForwardFiltersWide>(g, filters, weight, bias, addend, image, y);
    return;
  }
  const float* shifted = build_shifted(g, image, scratch);
  if (filters % kForwardFiltersWide == 0) {
    forward_rows<kForwardFiltersWide>(g, filters, weight, bias, addend, shifted, y);
  } else {
    forward_rows<kForwardFilters>(g, filters, weight, bias, addend, shifted, y);
  }
}

void conv_direct_weight_grad(const ConvGeometry& g, std::int64_t filters, const float* dy,
                             const float* image, float* scratch, float* lanes) {
  check_supported(g);
  const float* shifted = build_shifted(g, image, scratch);
  if (g.kernel_w == kGradShifts3 && g.out_height() <= 2 * kConvDirectLanes) {
    weight_grad_rows_4x3(g, filters, dy, shifted, lanes);  // its aligned dy rows fit the stack
  } else if (g.kernel_w == kGradShifts3) {
    weight_grad_rows<kGradFilters3, kGradShifts3>(g, filters, dy, shifted, lanes);
  } else {
    weight_grad_rows<kGradFilters, kGradShifts>(g, filters, dy, shifted, lanes);
  }
}

#else

void conv_direct_forward(const ConvGeometry& g, std::int64_t, const float*, const float*,
                         const float*, float*, float*, const float*) {
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
