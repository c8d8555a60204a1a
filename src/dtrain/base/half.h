// IEEE binary16 (f16) and bfloat16 (bf16) conversions, one element at a time: comm/'s f16 and bf16
// reductions run through float with them, and compress/'s fp16 and bf16 codecs are checked
// against them.
// Both directions round to nearest, ties to even; NaN stays NaN, overflow goes to infinity.
#pragma once

#include <bit>
#include <cstdint>

namespace dtrain {

// f32 -> f16 (after F. Giesen's float_to_half_fast3_rtne): subnormal results come from one
// float addition with a magic constant (the FPU rounds), normal ones from an integer round.
inline std::uint16_t float_to_f16(float value) {
  constexpr std::uint32_t kF32Infinity = 255u << 23;
  constexpr std::uint32_t kF16Max = (127u + 16u) << 23;  // 65536: everything above is infinity
  constexpr std::uint32_t kDenormMagic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = bits & 0x80000000u;
  bits ^= sign;
  std::uint32_t out = 0;
  if (bits >= kF16Max) {
    out = bits > kF32Infinity ? 0x7e00u : 0x7c00u;
  } else if (bits < (113u << 23)) {  // below 2^-14: an f16 subnormal or zero
    const float shifted = std::bit_cast<float>(bits) + std::bit_cast<float>(kDenormMagic);
    out = std::bit_cast<std::uint32_t>(shifted) - kDenormMagic;
  } else {
    const std::uint32_t mantissa_odd = (bits >> 13) & 1u;
    bits += (static_cast<std::uint32_t>(15 - 127) << 23) + 0xfffu;
    bits += mantissa_odd;
    out = bits >> 13;
  }
  return static_cast<std::uint16_t>(out | (sign >> 16));
}

inline float f16_to_float(std::uint16_t half) {
  const std::uint32_t sign = static_cast<std::uint32_t>(half & 0x8000u) << 16;
  const std::uint32_t exponent = (half >> 10) & 0x1fu;
  const std::uint32_t mantissa = half & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * (1.0f / 16777216.0f);
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

// f32 -> bf16: keep the top 16 bits, rounding the dropped 16 to nearest even; quiet NaNs.
inline std::uint16_t float_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

inline float bf16_to_float(std::uint16_t value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value) << 16);
}

}  // namespace dtrain
