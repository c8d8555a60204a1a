#include "dtrain/compress/topk_codec.h"

#include <algorithm>
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
// Sampled elements beyond 2k's share above the threshold: the margin that makes a sample
// that undercounts unlikely to leave fewer than k candidates.
constexpr std::int64_t kSampleMargin = 16;

struct Candidate {
  float magnitude;
  std::int32_t index;
};

// The total order of selection: larger magnitude first, then lower index.
inline bool before(const Candidate& a, const Candidate& b) {
  return a.magnitude > b.magnitude || (a.magnitude == b.magnitude && a.index < b.index);
}

// A magnitude that about 2k + kSampleMargin x n / kSamples elements reach, estimated from a
// strided sample: the elements with |x| >= it are the candidates. 0 takes every element.
float candidate_threshold(const float* x, std::int64_t n, std::int64_t k) {
  if (n < 4 * kSamples) return 0.0f;
  const std::int64_t stride = n / kSamples;
  const std::int64_t rank =
      (2 * k * kSamples + n - 1) / n + kSampleMargin;  // from the top, 1-based
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

// Appends (|x_i|, i) for every i with |x_i| >= threshold (NaN always, as +infinity), in index
// order.
void collect(const float* x, std::int64_t n, float threshold, std::vector<Candidate>& out) {
  out.clear();
  auto append = [&](std::int64_t i) {
    const float m = std::fabs(x[i]);
    out.push_back(
        {std::isnan(m) ? std::numeric_limits<float>::infinity() : m, static_cast<std::int32_t>(i)});
  };
  std::int64_t i = 0;
#if defined(__AVX__)
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
  thread_local std::vector<Candidate> candidates;
  thread_local std::vector<Candidate> order;
  collect(x, n, candidate_threshold(x, n, k), candidates);
  if (static_cast<std::int64_t>(candidates.size()) < k) collect(x, n, 0.0f, candidates);
  order = candidates;
  const auto kth = order.begin() + (k - 1);
  std::nth_element(order.begin(), kth, order.end(), before);
  const Candidate last = *kth;
  std::uint8_t* values = out;
  std::uint8_t* indices = out + 4 * k;
  std::int64_t kept = 0;
  for (const Candidate& c : candidates) {
    if (before(last, c)) continue;
    std::memcpy(values + 4 * kept, &x[c.index], 4);
    std::memcpy(indices + 4 * kept, &c.index, 4);
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
