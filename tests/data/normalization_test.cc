// Normalisation: the standard statistics, the checks on user-given ones, and decode_pixels against
// the formula evaluated one pixel at a time in double.
#include "dtrain/data/normalization.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;

TEST(Normalization, StandardStatistics) {
  const Normalization fashion = standard_normalization("fashion-mnist");
  EXPECT_EQ(fashion.mean, std::vector<float>{0.2860f});
  EXPECT_EQ(fashion.std, std::vector<float>{0.3530f});
  const Normalization mnist = standard_normalization("mnist");
  EXPECT_EQ(mnist.mean, std::vector<float>{0.1307f});
  EXPECT_EQ(mnist.std, std::vector<float>{0.3081f});
  const Normalization cifar = standard_normalization("cifar10");
  EXPECT_EQ(cifar.mean, (std::vector<float>{0.4914f, 0.4822f, 0.4465f}));
  EXPECT_EQ(cifar.std, (std::vector<float>{0.2470f, 0.2435f, 0.2616f}));
}

TEST(Normalization, UnknownNameListsTheKnownOnes) {
  try {
    standard_normalization("imagenet");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("imagenet"));
    EXPECT_THAT(e.what(), HasSubstr("fashion-mnist, mnist, cifar10"));
  }
}

TEST(Normalization, ChecksChannelsAndValues) {
  EXPECT_NO_THROW(check_normalization({{0.5f}, {0.2f}}, 1, "x"));
  EXPECT_THROW(check_normalization({{0.5f}, {0.2f}}, 3, "x"), ConfigError);
  EXPECT_THROW(check_normalization({{0.5f, 0.5f}, {0.2f}}, 2, "x"), ConfigError);
  EXPECT_THROW(check_normalization({{0.5f}, {0.0f}}, 1, "x"), ConfigError);
  EXPECT_THROW(check_normalization({{0.5f}, {-1.0f}}, 1, "x"), ConfigError);
  EXPECT_THROW(check_normalization({{std::numeric_limits<float>::quiet_NaN()}, {1.0f}}, 1, "x"),
               ConfigError);
}

TEST(Normalization, DecodeMatchesTheFormulaWithStridedRecords) {
  // 4 records of 1 extra byte + 3 channels x 5 pixels, every byte value appearing.
  constexpr std::int64_t kChannels = 3, kPlane = 5, kStride = 1 + kChannels * kPlane, kSamples = 4;
  std::vector<std::uint8_t> records(kStride * kSamples);
  for (std::size_t i = 0; i < records.size(); ++i)
    records[i] = static_cast<std::uint8_t>(i * 17 + 3);
  const Normalization norm{{0.1f, 0.5f, 0.9f}, {0.2f, 0.3f, 0.4f}};
  std::vector<float> out(kSamples * kChannels * kPlane, -99.0f);
  decode_pixels(records.data() + 1, kStride, kSamples, kChannels, kPlane, norm, out.data());
  for (std::int64_t n = 0; n < kSamples; ++n) {
    for (std::int64_t c = 0; c < kChannels; ++c) {
      for (std::int64_t p = 0; p < kPlane; ++p) {
        const double x = records[static_cast<std::size_t>(n * kStride + 1 + c * kPlane + p)];
        const double expected = (x / 255.0 - norm.mean[static_cast<std::size_t>(c)]) /
                                norm.std[static_cast<std::size_t>(c)];
        EXPECT_NEAR(out[static_cast<std::size_t>((n * kChannels + c) * kPlane + p)], expected,
                    1e-6);
      }
    }
  }
}

TEST(Normalization, DecodeEndpoints) {
  // 0 -> -mean/std and 255 -> (1 - mean)/std: (0 - 0.2860)/0.3530 = -0.810198..., (1 -
  // 0.2860)/0.3530 = 2.022663...
  const std::vector<std::uint8_t> pixels = {0, 255};
  std::vector<float> out(2);
  decode_pixels(pixels.data(), 2, 1, 1, 2, standard_normalization("fashion-mnist"), out.data());
  EXPECT_NEAR(out[0], -0.810198, 1e-5);
  EXPECT_NEAR(out[1], 2.022663, 1e-5);
}

}  // namespace
}  // namespace dtrain::data
