#include "dtrain/comm/reduce_op.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/half.h"

namespace dtrain::comm {
namespace {

TEST(HalfTest, F16KnownEncodings) {
  EXPECT_EQ(float_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_f16(65504.0f), 0x7bff);               // largest finite
  EXPECT_EQ(float_to_f16(65520.0f), 0x7c00);               // halfway to 2^16 rounds to infinity
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_f16(0.0f), 0x0000);
  EXPECT_EQ(float_to_f16(-0.0f), 0x8000);
  // Ties to even: 1 + 2^-11 lies halfway between 1 (even) and 1 + 2^-10.
  EXPECT_EQ(float_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);
  // 1 + 3 x 2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(float_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_TRUE((float_to_f16(std::numeric_limits<float>::quiet_NaN()) & 0x7fff) > 0x7c00);
}

TEST(HalfTest, F16RoundTripsEveryFiniteValue) {
  for (std::uint32_t h = 0; h < 0x10000; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    if ((half & 0x7c00) == 0x7c00) continue;  // inf / nan
    ASSERT_EQ(float_to_f16(f16_to_float(half)), half) << std::hex << h;
  }
  EXPECT_EQ(f16_to_float(0x3555), 0.333251953125f);  // 1365 / 4096
}

TEST(HalfTest, BF16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_float(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 (even) and 1 + 2^-7: stays 1.
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3 x 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: goes up.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16(257.0f), float_to_bf16(256.0f));  // 8 significant bits
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(ReduceOpTest, NamesRoundTripAndUnknownIsNamed) {
  for (ReduceOp op :
       {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd, ReduceOp::kMin, ReduceOp::kMax}) {
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  try {
    parse_reduce_op("mean");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'mean'"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("sum, avg, prod, min, max"), std::string::npos);
  }
}

TEST(ReduceOpTest, F32OpsByHand) {
  std::vector<float> acc = {1.5f, -2.0f, 3.0f};
  const std::vector<float> in = {0.5f, 4.0f, -1.0f};
  auto run = [&](ReduceOp op) {
    std::vector<float> a = acc;
    reduce_into(a.data(), in.data(), 3, DType::kF32, op);
    return a;
  };
  EXPECT_EQ(run(ReduceOp::kSum), (std::vector<float>{2.0f, 2.0f, 2.0f}));
  EXPECT_EQ(run(ReduceOp::kAvg), (std::vector<float>{2.0f, 2.0f, 2.0f}));  // a sum until divide_by
  EXPECT_EQ(run(ReduceOp::kProd), (std::vector<float>{0.75f, -8.0f, -3.0f}));
  EXPECT_EQ(run(ReduceOp::kMin), (std::vector<float>{0.5f, -2.0f, -1.0f}));
  EXPECT_EQ(run(ReduceOp::kMax), (std::vector<float>{1.5f, 4.0f, 3.0f}));
}

TEST(ReduceOpTest, IntegerTypesWrapAndTruncate) {
  std::vector<std::uint8_t> u = {250, 3};
  const std::vector<std::uint8_t> du = {10, 4};
  reduce_into(u.data(), du.data(), 2, DType::kU8, ReduceOp::kSum);
  EXPECT_EQ(u, (std::vector<std::uint8_t>{4, 7}));  // 260 mod 256
  std::vector<std::int64_t> big = {std::int64_t{1} << 40, -7};
  const std::vector<std::int64_t> dbig = {3, 2};
  reduce_into(big.data(), dbig.data(), 2, DType::kI64, ReduceOp::kProd);
  EXPECT_EQ(big, (std::vector<std::int64_t>{std::int64_t{3} << 40, -14}));
  std::vector<std::int32_t> avg = {-7, 7, 9};
  divide_by(avg.data(), 3, DType::kI32, 2);
  EXPECT_EQ(avg, (std::vector<std::int32_t>{-3, 3, 4}));  // toward zero
}

TEST(ReduceOpTest, HalfTypesReduceThroughFloatWithRounding) {
  // f16: 2048 + 1 = 2049 is not representable (spacing 2 above 2048); ties to even gives 2048.
  std::vector<std::uint16_t> acc = {float_to_f16(2048.0f), float_to_f16(0.1f)};
  const std::vector<std::uint16_t> in = {float_to_f16(1.0f), float_to_f16(0.2f)};
  reduce_into(acc.data(), in.data(), 2, DType::kF16, ReduceOp::kSum);
  EXPECT_EQ(f16_to_float(acc[0]), 2048.0f);
  EXPECT_EQ(acc[1],
            float_to_f16(f16_to_float(float_to_f16(0.1f)) + f16_to_float(float_to_f16(0.2f))));
  std::vector<std::uint16_t> b = {float_to_bf16(3.0f), float_to_bf16(-1.0f)};
  const std::vector<std::uint16_t> bin = {float_to_bf16(5.0f), float_to_bf16(-4.0f)};
  reduce_into(b.data(), bin.data(), 2, DType::kBF16, ReduceOp::kMax);
  EXPECT_EQ(bf16_to_float(b[0]), 5.0f);
  EXPECT_EQ(bf16_to_float(b[1]), -1.0f);
  divide_by(b.data(), 2, DType::kBF16, 3);
  EXPECT_EQ(b[0], float_to_bf16(5.0f / 3.0f));
}

TEST(ReduceOpTest, ZeroCountTouchesNothing) {
  float a = 1.0f;
  const float b = 2.0f;
  reduce_into(&a, &b, 0, DType::kF32, ReduceOp::kSum);
  divide_by(&a, 0, DType::kF32, 4);
  EXPECT_EQ(a, 1.0f);
}

}  // namespace
}  // namespace dtrain::comm
