#include "dtrain/compress/fp16_codec.h"

#include <cstring>

#include "dtrain/base/half.h"

#if defined(__F16C__) && defined(__AVX__)
#include <immintrin.h>
#endif

namespace dtrain::compress {
namespace {

// The element-wise conversions; `start` is where the vector loops stopped.
void encode_scalar(const float* x, std::int64_t start, std::int64_t n, std::uint8_t* out) {
  for (std::int64_t i = start; i < n; ++i) {
    const std::uint16_t h = float_to_f16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

template <bool kAdd>
void decode_scalar(const std::uint8_t* in, std::int64_t start, std::int64_t n, float* out) {
  for (std::int64_t i = start; i < n; ++i) {
    std::uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    if constexpr (kAdd) {
      out[i] += f16_to_float(h);
    } else {
      out[i] = f16_to_float(h);
    }
  }
}

template <bool kAdd>
void decode_f16(const std::uint8_t* in, std::int64_t n, float* out) {
  std::int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    if constexpr (kAdd) v = _mm256_add_ps(v, _mm256_loadu_ps(out + i));
    _mm256_storeu_ps(out + i, v);
  }
#endif
  decode_scalar<kAdd>(in, i, n, out);
}

}  // namespace

std::size_t Fp16Codec::encoded_bytes(std::int64_t n) const {
  return 2 * static_cast<std::size_t>(n);
}

void Fp16Codec::encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t) const {
  std::int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i), h);
  }
#endif
  encode_scalar(x, i, n, out);
}

void Fp16Codec::decode(const std::uint8_t* in, std::int64_t n, float* out, std::uint64_t) const {
  decode_f16<false>(in, n, out);
}

void Fp16Codec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                           std::uint64_t) const {
  decode_f16<true>(in, n, out);
}

}  // namespace dtrain::compress
