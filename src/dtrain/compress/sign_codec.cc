#include "dtrain/compress/sign_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "dtrain/compress/sums.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

namespace dtrain::compress {
namespace {

constexpr std::size_t kScaleBytes = 4;

inline std::uint8_t sign_byte(const float* x, int count) {
  std::uint32_t byte = 0;
  for (int j = 0; j < count; ++j) byte |= (std::bit_cast<std::uint32_t>(x[j]) >> 31) << j;
  return static_cast<std::uint8_t>(byte);
}

// out[0..count) (+)= +-scale by the bits of `byte`: the scale's bits with the sign bit set.
template <bool kAdd>
inline void expand_byte(std::uint32_t byte, std::uint32_t scale_bits, float* out, int count) {
  for (int j = 0; j < count; ++j) {
    const float v = std::bit_cast<float>(scale_bits | (((byte >> j) & 1u) << 31));
    if constexpr (kAdd) {
      out[j] += v;
    } else {
      out[j] = v;
    }
  }
}

template <bool kAdd>
void decode_signs(const std::uint8_t* in, std::int64_t n, float* out) {
  float scale;
  std::memcpy(&scale, in, kScaleBytes);
  const std::uint32_t scale_bits = std::bit_cast<std::uint32_t>(scale);
  const std::uint8_t* bits = in + kScaleBytes;
  std::int64_t i = 0;
#if defined(__AVX512F__)
  // 16 lanes per instruction: two bytes of bits are the blend mask (bit j set: lane j negative).
  const __m512 positive = _mm512_set1_ps(scale);
  const __m512 negative = _mm512_set1_ps(-scale);
  for (; i + 16 <= n; i += 16) {
    std::uint16_t mask;
    std::memcpy(&mask, bits + i / 8, 2);
    __m512 v = _mm512_mask_blend_ps(static_cast<__mmask16>(mask), positive, negative);
    if constexpr (kAdd) v = _mm512_add_ps(v, _mm512_loadu_ps(out + i));
    _mm512_storeu_ps(out + i, v);
  }
#endif
#if defined(__AVX2__)
  // Lane j shifts bit j of the byte up to the sign position, and ors in the scale.
  const __m256i to_sign = _mm256_setr_epi32(31, 30, 29, 28, 27, 26, 25, 24);
  const __m256i sign_mask = _mm256_set1_epi32(static_cast<int>(0x80000000u));
  const __m256i magnitude = _mm256_set1_epi32(static_cast<int>(scale_bits));
  for (; i + 8 <= n; i += 8) {
    const __m256i byte = _mm256_set1_epi32(bits[i / 8]);
    const __m256i sign = _mm256_and_si256(_mm256_sllv_epi32(byte, to_sign), sign_mask);
    __m256 v = _mm256_castsi256_ps(_mm256_or_si256(sign, magnitude));
    if constexpr (kAdd) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
#endif
  for (; i + 8 <= n; i += 8) expand_byte<kAdd>(bits[i / 8], scale_bits, out + i, 8);
  if (i < n) expand_byte<kAdd>(bits[i / 8], scale_bits, out + i, static_cast<int>(n - i));
}

}  // namespace

std::size_t SignCodec::encoded_bytes(std::int64_t n) const {
  return kScaleBytes + static_cast<std::size_t>((n + 7) / 8);
}

void SignCodec::encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t) const {
  // One pass in blocks that stay in L1: the block's sum of |x|, then its sign bits.
  constexpr std::int64_t kBlock = 4096;  // a multiple of 8
  std::uint8_t* bits = out + kScaleBytes;
  double total = 0.0;
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t end = std::min(n, start + kBlock);
    total += sum_abs(x + start, end - start);
    std::int64_t i = start;
#if defined(__AVX512DQ__)
    // The 16 sign bits of 16 floats, lane j to bit j, in one instruction.
    for (; i + 16 <= end; i += 16) {
      const auto mask = static_cast<std::uint16_t>(
          _mm512_movepi32_mask(_mm512_castps_si512(_mm512_loadu_ps(x + i))));
      std::memcpy(bits + i / 8, &mask, 2);
    }
#endif
#if defined(__AVX__)
    // One instruction gathers the 8 sign bits of 8 floats, lane j to bit j.
    for (; i + 8 <= end; i += 8) {
      bits[i / 8] = static_cast<std::uint8_t>(_mm256_movemask_ps(_mm256_loadu_ps(x + i)));
    }
#endif
    for (; i + 8 <= end; i += 8) bits[i / 8] = sign_byte(x + i, 8);
    if (i < end) bits[i / 8] = sign_byte(x + i, static_cast<int>(end - i));
  }
  const float scale = n > 0 ? static_cast<float>(total / static_cast<double>(n)) : 0.0f;
  std::memcpy(out, &scale, kScaleBytes);
}

void SignCodec::decode(const std::uint8_t* in, std::int64_t n, float* out, std::uint64_t) const {
  decode_signs<false>(in, n, out);
}

void SignCodec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                           std::uint64_t) const {
  decode_signs<true>(in, n, out);
}

}  // namespace dtrain::compress
