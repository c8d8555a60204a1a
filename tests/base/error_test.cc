#include "dtrain/base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/dtype.h"
#include "dtrain/base/env.h"
#include "dtrain/base/log.h"

namespace dtrain {
namespace {

using ::testing::HasSubstr;

TEST(Check, PrintsBothSidesAndTheLocation) {
  try {
    const int expected = 784, got = 783;
    DTRAIN_CHECK_EQ(expected, got);
    FAIL() << "no throw";
  } catch (const InternalError& e) {
    EXPECT_THAT(e.what(), HasSubstr("expected == got (784 vs 783)"));
    EXPECT_THAT(e.what(), HasSubstr("error_test.cc"));
  }
}

TEST(Check, PassingChecksDoNothing) {
  DTRAIN_CHECK_LT(1, 2);
  DTRAIN_CHECK(true, "never {}", 1);
}

TEST(DType, NamesSizesAndParsing) {
  for (DType d : {DType::kF32, DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kI64,
                  DType::kU8}) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
  }
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kI64), 8u);
  try {
    parse_dtype("f8");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("'f8'"));
    EXPECT_THAT(e.what(), HasSubstr("bf16"));
  }
}

TEST(Env, ParsesStrictly) {
  setenv("DTRAIN_TEST_KNOB", "12", 1);
  EXPECT_EQ(env::get_int("DTRAIN_TEST_KNOB", 3), 12);
  setenv("DTRAIN_TEST_KNOB", "12x", 1);
  EXPECT_THROW(env::get_int("DTRAIN_TEST_KNOB", 3), ConfigError);
  setenv("DTRAIN_TEST_KNOB", "on", 1);
  EXPECT_TRUE(env::get_bool("DTRAIN_TEST_KNOB", false));
  setenv("DTRAIN_TEST_KNOB", "maybe", 1);
  EXPECT_THROW(env::get_bool("DTRAIN_TEST_KNOB", false), ConfigError);
  unsetenv("DTRAIN_TEST_KNOB");
  EXPECT_EQ(env::get_int("DTRAIN_TEST_KNOB", 3), 3);
  EXPECT_DOUBLE_EQ(env::get_double("DTRAIN_TEST_KNOB", 0.5), 0.5);
}

TEST(Log, ParsesLevelsAndRejectsOthers) {
  EXPECT_EQ(log::parse_level("warn"), log::Level::kWarn);
  EXPECT_THROW(log::parse_level("loud"), ConfigError);
}

}  // namespace
}  // namespace dtrain
