#include "dtrain/compress/bf16_codec.h"

#include <bit>
#include <cstring>

namespace dtrain::compress {
namespace {

// base/half.h's float_to_bf16 without its branch, so that the loop vectorizes: a NaN keeps its
// top bits with the quiet bit set, everything else rounds to nearest even.
inline std::uint16_t to_bf16(float value) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x40u;
  return static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float from_bf16(const std::uint8_t* in) {
  std::uint16_t h;
  std::memcpy(&h, in, 2);
  return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

}  // namespace

std::size_t Bf16Codec::encoded_bytes(std::int64_t n) const {
  return 2 * static_cast<std::size_t>(n);
}

void Bf16Codec::encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t) const {
  for (std::int64_t i = 0; i < n; ++i) {
    const std::uint16_t h = to_bf16(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

void Bf16Codec::decode(const std::uint8_t* in, std::int64_t n, float* out, std::uint64_t) const {
  for (std::int64_t i = 0; i < n; ++i) out[i] = from_bf16(in + 2 * i);
}

void Bf16Codec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                           std::uint64_t) const {
  for (std::int64_t i = 0; i < n; ++i) out[i] += from_bf16(in + 2 * i);
}

}  // namespace dtrain::compress
