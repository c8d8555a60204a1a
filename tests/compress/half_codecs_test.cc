// fp16 and bf16 (fp16_codec.h, bf16_codec.h): bit for bit the scalar conversions of base/half.h
// (the vector paths included), lossless on values of their format, and within their error bound
// (2^-11 and 2^-8 relative in the normal range) elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "dtrain/base/half.h"
#include "dtrain/compress/bf16_codec.h"
#include "dtrain/compress/fp16_codec.h"
#include "random_values.h"

namespace dtrain::compress {
namespace {

// Values over many binades, signs, zeros, f16 subnormals, overflow and infinity; 1000 + 3 of them
// so that the vector loops and the scalar tails both run.
std::vector<float> spread_values() {
  std::vector<float> x = testing::random_values(1003, 21);
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = std::ldexp(x[i], static_cast<int>(i % 61) - 30);
  }
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 65504.0f;
  x[3] = 1e6f;
  x[4] = -std::numeric_limits<float>::infinity();
  x[5] = 3e-6f;  // an f16 subnormal
  x[6] = 1e-9f;  // rounds to f16 zero
  return x;
}

std::uint16_t half_at(const std::vector<std::uint8_t>& payload, std::size_t i) {
  std::uint16_t h;
  std::memcpy(&h, payload.data() + 2 * i, 2);
  return h;
}

TEST(Fp16Codec, MatchesTheScalarConversionBitForBit) {
  const std::vector<float> x = spread_values();
  const auto n = static_cast<std::int64_t>(x.size());
  Fp16Codec codec;
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> y(x.size());
  codec.decode(payload.data(), n, y.data(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(half_at(payload, i), float_to_f16(x[i])) << "element " << i << " = " << x[i];
    ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]),
              std::bit_cast<std::uint32_t>(f16_to_float(float_to_f16(x[i]))))
        << "element " << i;
  }
}

TEST(Fp16Codec, ErrorWithinHalfAnUlpOfF16) {
  const std::vector<float> x = spread_values();
  const auto n = static_cast<std::int64_t>(x.size());
  Fp16Codec codec;
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> y(x.size());
  codec.decode(payload.data(), n, y.data(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float a = std::fabs(x[i]);
    if (a >= 65520.0f) {
      EXPECT_TRUE(std::isinf(y[i])) << x[i];
    } else if (a >= 0x1.0p-14f) {
      EXPECT_LE(std::fabs(y[i] - x[i]), 0x1.0p-11f * a) << x[i];
    } else {
      EXPECT_LE(std::fabs(y[i] - x[i]), 0x1.0p-25f) << x[i];
    }
  }
}

TEST(Fp16Codec, LosslessOnF16Values) {
  // Every finite f16 number, through the codec and back, is itself.
  std::vector<float> x;
  for (std::uint32_t h = 0; h < 0x10000u; ++h) {
    if (((h >> 10) & 0x1f) != 0x1f) x.push_back(f16_to_float(static_cast<std::uint16_t>(h)));
  }
  const auto n = static_cast<std::int64_t>(x.size());
  Fp16Codec codec;
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> y(x.size());
  codec.decode(payload.data(), n, y.data(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(y[i]), std::bit_cast<std::uint32_t>(x[i])) << i;
  }
}

TEST(Bf16Codec, MatchesTheScalarConversionAndItsBound) {
  std::vector<float> x = spread_values();
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  const auto n = static_cast<std::int64_t>(x.size());
  Bf16Codec codec;
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> y(x.size());
  codec.decode(payload.data(), n, y.data(), 0);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(half_at(payload, i), float_to_bf16(x[i])) << "element " << i << " = " << x[i];
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i]));
    } else if (std::isfinite(x[i]) && x[i] != 0.0f) {
      EXPECT_LE(std::fabs(y[i] - x[i]), 0x1.0p-8f * std::fabs(x[i])) << x[i];
    }
  }
}

TEST(Bf16Codec, LosslessOnBf16Values) {
  std::vector<float> x = testing::random_values(999, 5);
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  const auto n = static_cast<std::int64_t>(x.size());
  Bf16Codec codec;
  std::vector<std::uint8_t> payload(codec.encoded_bytes(n));
  codec.encode(x.data(), n, payload.data(), 0);
  std::vector<float> y(x.size());
  codec.decode(payload.data(), n, y.data(), 0);
  EXPECT_EQ(y, x);
}

}  // namespace
}  // namespace dtrain::compress
