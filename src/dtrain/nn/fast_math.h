// fast_exp and fast_erf: f32 exp and erf that the compiler vectorises (no calls into libm).
//
// Why: the transformer evaluates about 4 million exps (the causal softmax of attention) and 8
// million erf/exp pairs (GELU forward and backward) per training step of the reference model, and
// the loss another million exps. glibc's expf is a scalar call of ~3 ns, so std::exp alone would
// cost ~15 ms a step, 5% of the whole step; these straight-line polynomials take ~0.3 ns per value
// with AVX-512. Measured over the whole f32 range against double precision:
//   fast_exp(x): relative error <= 1.0e-7 for x in [-87, 88] (about 1 ulp); 0 below -87.3 (where
//                e^x is denormal or 0), e^88 above 88 (softmax and the loss only pass x <= 0).
//   fast_erf(x): absolute error <= 3.5e-7, relative <= 3.1e-7; +-1 beyond |x| = 4 up to 1.6e-8.
// tests/nn/fast_math_test.cc checks both bounds on a dense grid.
//
// fast_exp: Cody-Waite range reduction e^x = 2^n e^r with n = round(x log2 e) and
// r = x - n ln 2 in [-ln2/2, ln2/2] (ln 2 split into a 16-bit head, so n * head is exact, and a
// tail), then Cephes' degree-6 minimax polynomial for e^r, and 2^n put into the exponent bits.
// lane_sum and lane_max: reductions over a row that vectorise. A plain `sum += v[i]` loop is one
// chain of dependent adds (4 cycles each) because f32 addition is not associative and the compiler
// must keep the order; 16 independent partial sums, combined at the end, let it use whole vector
// registers. The order is fixed by n alone, so results never depend on threads.
// fast_erf: the rational minimax approximation x P(x^2) / Q(x^2) on [-4, 4] that Eigen and XLA use
// for f32 erf (degree 13 over degree 8).
// fast_exp16 (AVX-512 only): fast_exp on 16 lanes, the same operations in the same order, so each
// lane equals fast_exp of it bit for bit (tests/nn/fast_math_test.cc); for kernels written with
// intrinsics (the causal softmax), whose masked tails need no scalar loop. reduce_add16 and
// reduce_max16 fold a vector's 16 lanes in a fixed order.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

namespace dtrain::nn {

inline float fast_exp(float x) {
  const float clamped = std::clamp(x, -87.0f, 88.0f);
  const float n = std::nearbyint(clamped * 1.44269504088896341f);
  // Subtract the exact head first: the tail's rounding then stays below r's own ulp.
  const float r = std::fma(n, -1.428606765330187045e-6f, std::fma(n, -0.693145751953125f, clamped));
  float p = 1.9875691500e-4f;
  p = std::fma(p, r, 1.3981999507e-3f);
  p = std::fma(p, r, 8.3334519073e-3f);
  p = std::fma(p, r, 4.1665795894e-2f);
  p = std::fma(p, r, 1.6666665459e-1f);
  p = std::fma(p, r, 5.0000001201e-1f);
  p = std::fma(p, r * r, r) + 1.0f;
  const float two_n = std::bit_cast<float>((static_cast<std::int32_t>(n) + 127) << 23);
  return x < -87.3f ? 0.0f : p * two_n;
}

#if defined(__AVX512F__)
// GCC 12 warns (maybe-uninitialized, an error here) on the plain forms of several AVX-512
// intrinsics, which start from _mm512_undefined_ps(); the zero-masked forms with every lane set
// are the same instructions without that.
inline constexpr __mmask16 kAllLanes16 = 0xFFFF;

inline __m512 fast_exp16(__m512 x) {
  // max and min return their second operand when either is NaN: x goes second, so that a NaN
  // stays NaN (as std::clamp in fast_exp leaves it) instead of becoming exp(-87).
  const __m512 clamped =
      _mm512_maskz_min_ps(kAllLanes16, _mm512_set1_ps(88.0f),
                          _mm512_maskz_max_ps(kAllLanes16, _mm512_set1_ps(-87.0f), x));
  const __m512 n = _mm512_maskz_roundscale_ps(
      kAllLanes16, _mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(-1.428606765330187045e-6f),
                      _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693145751953125f), clamped));
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  const __m512i bits = _mm512_maskz_slli_epi32(
      kAllLanes16,
      _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAllLanes16, n), _mm512_set1_epi32(127)), 23);
  const __mmask16 keep = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.3f), _CMP_NLT_UQ);
  return _mm512_maskz_mul_ps(keep, p, _mm512_castsi512_ps(bits));
}

// The sum and the maximum of the 16 lanes, folded in halves (a fixed order): one fold, whose lane
// operation LaneOp is a function object defined for __m256 and __m128 (LaneAdd, LaneMax). The last
// step uses the full 128-bit operation, whose lane 0 is that of the _ss form.
struct LaneAdd {
  __m256 operator()(__m256 a, __m256 b) const { return _mm256_add_ps(a, b); }
  __m128 operator()(__m128 a, __m128 b) const { return _mm_add_ps(a, b); }
};
struct LaneMax {
  __m256 operator()(__m256 a, __m256 b) const { return _mm256_max_ps(a, b); }
  __m128 operator()(__m128 a, __m128 b) const { return _mm_max_ps(a, b); }
};

template <typename LaneOp>
inline float reduce16(__m512 v, LaneOp op) {
  const __m256 lo = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 0));
  const __m256 hi = _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0xF, _mm512_castps_pd(v), 1));
  const __m256 r8 = op(lo, hi);
  __m128 r4 = op(_mm256_castps256_ps128(r8), _mm256_extractf128_ps(r8, 1));
  r4 = op(r4, _mm_movehl_ps(r4, r4));
  r4 = op(r4, _mm_movehdup_ps(r4));
  return _mm_cvtss_f32(r4);
}

inline float reduce_add16(__m512 v) { return reduce16(v, LaneAdd{}); }
inline float reduce_max16(__m512 v) { return reduce16(v, LaneMax{}); }
#endif

inline float fast_erf(float x) {
  const float c = std::clamp(x, -4.0f, 4.0f);
  const float c2 = c * c;
  float p = -2.72614225801306e-10f;
  p = std::fma(c2, p, 2.77068142495902e-08f);
  p = std::fma(c2, p, -2.10102402082508e-06f);
  p = std::fma(c2, p, -5.69250639462346e-05f);
  p = std::fma(c2, p, -7.34990630326855e-04f);
  p = std::fma(c2, p, -2.95459980854025e-03f);
  p = std::fma(c2, p, -1.60960333262415e-02f);
  float q = -1.45660718464996e-05f;
  q = std::fma(c2, q, -2.13374055278905e-04f);
  q = std::fma(c2, q, -1.68282697438203e-03f);
  q = std::fma(c2, q, -7.37332916720468e-03f);
  q = std::fma(c2, q, -1.42647390514189e-02f);
  return c * p / q;
}

// sum over i in [0, n) of value(i), in 16 interleaved partial sums.
template <typename Value>
inline float lane_sum(std::int64_t n, const Value& value) {
  constexpr std::int64_t kLanes = 16;
  float lanes[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] += value(i + j);
  }
  for (std::int64_t j = 0; i + j < n; ++j) lanes[j] += value(i + j);
  float total = 0.0f;
  for (std::int64_t j = 0; j < kLanes; ++j) total += lanes[j];
  return total;
}

// max over i in [0, n) of v[i], n >= 1, in 16 interleaved partial maxima (NaN-free input).
inline float lane_max(const float* v, std::int64_t n) {
  constexpr std::int64_t kLanes = 16;
  float lanes[kLanes];
  for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = v[0];
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::int64_t j = 0; j < kLanes; ++j) lanes[j] = std::max(lanes[j], v[i + j]);
  }
  for (std::int64_t j = 0; i + j < n; ++j) lanes[j] = std::max(lanes[j], v[i + j]);
  float best = lanes[0];
  for (std::int64_t j = 1; j < kLanes; ++j) best = std::max(best, lanes[j]);
  return best;
}

}  // namespace dtrain::nn
