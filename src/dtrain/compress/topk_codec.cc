#include "dtrain/compress/topk_codec.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <vector>

#include "dtrain/base/error.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace dtrain::compress {
namespace {

constexpr std::int64_t kSamples = 4096;
// Sampled elements expected above the k-th magnitude: e = k x kSamples / n. The threshold is the
// sample's (e + 3 sqrt(e) + 4)-th largest, so that a sample that undercounts by three standard
// deviations still leaves k candidates (about 1.5k for k = 1% of 2^20; fewer than k happens
// about once in 10^3 calls and falls back to every element).
std::int64_t sample_rank(std::int64_t k, std::int64_t n) {
  const double expected = static_cast<double>(k) * kSamples / static_cast<double>(n);
  return static_cast<std::int64_t>(std::ceil(expected + 3.0 * std::sqrt(expected))) + 4;
}

// A magnitude's order key: the bits of |x| (non-negative floats order as their bit patterns),
// NaN as +infinity's.
inline std::uint32_t magnitude_key(float v) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(v) & 0x7fffffffu;
  return bits > 0x7f800000u ? 0x7f800000u : bits;
}

// A magnitude that a little more than k elements reach (sample_rank), estimated from a strided
// sample: the elements with |x| >= it are the candidates. 0 takes every element.
float candidate_threshold(const float* x, std::int64_t n, std::int64_t k) {
  if (n < 4 * kSamples) return 0.0f;
  const std::int64_t stride = n / kSamples;
  const std::int64_t rank = sample_rank(k, n);  // from the top, 1-based
  if (rank >= kSamples) return 0.0f;
  thread_local std::vector<float> sample;
  sample.resize(static_cast<std::size_t>(kSamples));
  for (std::int64_t j = 0; j < kSamples; ++j) {
    const float m = std::fabs(x[j * stride]);
    sample[j] = std::isnan(m) ? std::numeric_limits<float>::infinity() : m;
  }
  const auto nth = sample.begin() + (rank - 1);
  std::nth_element(sample.begin(), nth, sample.end(), std::greater<float>());
  return *nth;
}

// Appends i and its key for every i with |x_i| >= threshold (NaN always), in index order.
void collect(const float* x, std::int64_t n, float threshold, std::vector<std::int32_t>& indices,
             std::vector<std::uint32_t>& keys) {
  indices.clear();
  keys.clear();
  auto append = [&](std::int64_t i) {
    indices.push_back(static_cast<std::int32_t>(i));
    keys.push_back(magnitude_key(x[i]));
  };
  std::int64_t i = 0;
#if defined(__AVX512F__)
  // 16 comparisons per instruction, and the hits compress-stored with no branch per hit (a branch
  // per group of 8 mispredicted about once per candidate, most of the pass's time).
  std::int64_t count = 0;
  const __m512 limit = _mm512_set1_ps(threshold);
  const __m512i magnitude_bits = _mm512_set1_epi32(0x7fffffff);
  const __m512i infinity = _mm512_set1_epi32(0x7f800000);
  const __m512i sixteen = _mm512_set1_epi32(16);
  __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (; i + 16 <= n; i += 16, lane = _mm512_add_epi32(lane, sixteen)) {
    const __m512i bits =
        _mm512_and_si512(_mm512_castps_si512(_mm512_loadu_ps(x + i)), magnitude_bits);
    const __mmask16 hits = _mm512_cmp_ps_mask(_mm512_castsi512_ps(bits), limit, _CMP_NLT_UQ);
    if (std::ssize(indices) < count + 16) {
      indices.resize(static_cast<std::size_t>(2 * (count + 16)));
      keys.resize(static_cast<std::size_t>(2 * (count + 16)));
    }
    // Compressed in a register, then a full store: the masked compress-store to memory is
    // microcoded on some CPUs (AMD Zen 4) and ran 4x slower than the branchy AVX loop. The 16
    // slots past `count` exist (resized above); what lands beyond the hits is overwritten.
    _mm512_storeu_si512(indices.data() + count, _mm512_maskz_compress_epi32(hits, lane));
    _mm512_storeu_si512(keys.data() + count,
                        _mm512_maskz_compress_epi32(
                            hits, _mm512_mask_blend_epi32(_mm512_cmpgt_epu32_mask(bits, infinity),
                                                          bits, infinity)));
    count += std::popcount(static_cast<unsigned>(hits));
  }
  indices.resize(static_cast<std::size_t>(count));
  keys.resize(static_cast<std::size_t>(count));
#elif defined(__AVX__)
  // 8 comparisons per instruction; most groups hold no candidate and cost nothing more.
  const __m256 limit = _mm256_set1_ps(threshold);
  const __m256 magnitude_bits = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  for (; i + 8 <= n; i += 8) {
    const __m256 m = _mm256_and_ps(_mm256_loadu_ps(x + i), magnitude_bits);
    auto hits = static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(m, limit, _CMP_NLT_UQ)));
    for (; hits != 0; hits &= hits - 1) append(i + std::countr_zero(hits));
  }
#endif
  for (; i < n; ++i) {
    if (!(std::fabs(x[i]) < threshold)) append(i);
  }
}

// The k-th largest of `keys` (1 <= k <= keys.size()) by radix selection, most significant digits
// first (11, 11, 10 bits): three counting passes over the keys, no comparisons to mispredict
// (an nth_element over the same ~2k candidates cost 4x more). `ties`: how many keys equal to the
// result are among the k largest.
std::uint32_t kth_largest(const std::vector<std::uint32_t>& keys, std::int64_t k,
                          std::int64_t& ties) {
  constexpr int kShifts[3] = {21, 10, 0};
  constexpr int kWidths[3] = {11, 11, 10};
  std::uint32_t prefix = 0, mask = 0;
  std::int64_t remaining = k;  // rank from the top among the keys that match prefix
  std::array<std::int64_t, 2048> counts;
  for (int pass = 0; pass < 3; ++pass) {
    const int shift = kShifts[pass];
    const std::uint32_t digit_mask = (1u << kWidths[pass]) - 1;
    counts.fill(0);
    for (const std::uint32_t key : keys) {
      if ((key & mask) == prefix) ++counts[(key >> shift) & digit_mask];
    }
    for (std::uint32_t d = digit_mask;; --d) {
      if (counts[d] >= remaining) {
        prefix |= d << shift;
        break;
      }
      remaining -= counts[d];
      DTRAIN_CHECK(d > 0, "top-k: fewer than {} candidates", k);
    }
    mask |= digit_mask << shift;
  }
  ties = remaining;
  return prefix;
}

template <bool kAdd>
void scatter(const std::uint8_t* in, std::int64_t k, float* out) {
  const std::uint8_t* values = in;
  const std::uint8_t* indices = in + 4 * k;
  for (std::int64_t j = 0; j < k; ++j) {
    float v;
    std::int32_t i;
    std::memcpy(&v, values + 4 * j, 4);
    std::memcpy(&i, indices + 4 * j, 4);
    if constexpr (kAdd) {
      out[i] += v;
    } else {
      out[i] = v;
    }
  }
}

}  // namespace

std::size_t TopkCodec::encoded_bytes(std::int64_t n) const {
  return 8 * static_cast<std::size_t>(keep_.of(n));
}

void TopkCodec::encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t) const {
  DTRAIN_CHECK_LE(n, std::int64_t{std::numeric_limits<std::int32_t>::max()});
  const std::int64_t k = keep_.of(n);
  if (k == 0) return;
  // Scratch kept per thread: a step allocates nothing after the first.
  thread_local std::vector<std::int32_t> indices;
  thread_local std::vector<std::uint32_t> keys;
  collect(x, n, candidate_threshold(x, n, k), indices, keys);
  if (static_cast<std::int64_t>(indices.size()) < k) collect(x, n, 0.0f, indices, keys);
  // Kept: every key above the k-th, and the first `ties` equal to it (ties go to the lower index).
  std::int64_t ties = 0;
  const std::uint32_t last = kth_largest(keys, k, ties);
  std::uint8_t* values = out;
  std::uint8_t* kept_indices = out + 4 * k;
  std::int64_t kept = 0;
  for (std::size_t c = 0; c < indices.size(); ++c) {
    if (keys[c] < last || (keys[c] == last && ties-- <= 0)) continue;
    std::memcpy(values + 4 * kept, &x[indices[c]], 4);
    std::memcpy(kept_indices + 4 * kept, &indices[c], 4);
    ++kept;
  }
  DTRAIN_CHECK_EQ(kept, k);
}

void TopkCodec::decode(const std::uint8_t* in, std::int64_t n, float* out, std::uint64_t) const {
  std::fill(out, out + n, 0.0f);
  scatter<false>(in, keep_.of(n), out);
}

void TopkCodec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                           std::uint64_t) const {
  scatter<true>(in, keep_.of(n), out);
}

}  // namespace dtrain::compress
