// conv_direct (the AVX-512 direct convolution of wide, stride-1 layers) against the naive direct
// convolution of conv_reference.h: forward and weight gradient on shapes that exercise the partial
// filter and shift groups, several channels, padding wider than the kernel reach, and row widths
// from 17 to 32; the lane fold by hand.
#include "dtrain/tensor/conv_direct.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/tensor/conv_reference.h"
#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

struct Case {
  std::int64_t channels, height, width, kernel_h, kernel_w, padding, filters;
};

std::string case_str(const Case& k) {
  return "C=" + std::to_string(k.channels) + " H=" + std::to_string(k.height) +
         " W=" + std::to_string(k.width) + " K=" + std::to_string(k.kernel_h) + "x" +
         std::to_string(k.kernel_w) + " P=" + std::to_string(k.padding) +
         " F=" + std::to_string(k.filters);
}

ConvGeometry geometry(const Case& k) {
  return ConvGeometry{k.channels, k.height, k.width, k.kernel_h, k.kernel_w, 1, k.padding};
}

// LeNet's conv1 (OW 28), a CIFAR-like first layer (3 channels, OW 28), the extremes OW = 17 and
// OW = 32, filter counts that leave partial groups of 6 and of 3 (1, 4, 7, 8), kernel widths that
// leave a partial group of 5 shifts (2, 3, 7), non-square kernels and padding 0 to 3.
const std::vector<Case> kCases = {
    {1, 28, 28, 5, 5, 2, 6},
    {3, 32, 32, 5, 5, 0, 6},
    {1, 5, 17, 3, 3, 1, 4},
    {2, 6, 32, 1, 1, 0, 7},
    {2, 9, 30, 3, 7, 3, 8},
    {1, 4, 20, 2, 2, 0, 1},
    {3, 7, 26, 4, 3, 2, 5},
    // ResNet's 3x3 shapes: 8 filters a forward step (16, 8), 4 filters x 3 shifts a weight-gradient
    // step (16; 5 and 6 leave partial groups of 4).
    {4, 6, 20, 3, 3, 1, 16},
    {2, 5, 28, 3, 3, 1, 8},
    {3, 4, 19, 3, 3, 0, 5},
    {1, 3, 30, 3, 3, 2, 6},
    // Taller than 32 output rows (the 4 x 3 kernel's stack rows hold 32): the generic kernel.
    {2, 40, 24, 3, 3, 1, 5},
};

TEST(ConvDirect, SupportsStrideOneWithRowsOf17To32) {
  if (!conv_direct_supported(geometry({1, 28, 28, 5, 5, 2, 6}))) {
    GTEST_SKIP() << "built without AVX-512";
  }
  EXPECT_TRUE(conv_direct_supported(geometry({1, 3, 17, 1, 1, 0, 1})));
  EXPECT_TRUE(conv_direct_supported(geometry({1, 3, 32, 1, 1, 0, 1})));
  EXPECT_FALSE(conv_direct_supported(geometry({1, 3, 16, 1, 1, 0, 1})));    // OW 16
  EXPECT_FALSE(conv_direct_supported(geometry({1, 3, 33, 1, 1, 0, 1})));    // OW 33
  EXPECT_FALSE(conv_direct_supported(geometry({6, 14, 14, 5, 5, 0, 16})));  // LeNet conv2: OW 10
  ConvGeometry strided = geometry({1, 28, 28, 5, 5, 2, 6});
  strided.stride = 2;
  EXPECT_FALSE(conv_direct_supported(strided));
}

TEST(ConvDirect, ForwardMatchesNaive) {
  std::uint64_t seed = 10;
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    if (!conv_direct_supported(g)) GTEST_SKIP() << "built without AVX-512";
    const auto image = random_values(k.channels * k.height * k.width, seed++);
    const auto weight = random_values(k.filters * g.col_rows(), seed++);
    const auto bias = random_values(k.filters, seed++);
    const auto out = static_cast<std::size_t>(k.filters * g.col_cols());
    for (const bool with_bias : {true, false}) {
      const float* b = with_bias ? bias.data() : nullptr;
      // Scratch and output start as garbage: both must be fully written by the call.
      std::vector<float> scratch(static_cast<std::size_t>(conv_direct_scratch_size(g)), 9.0f);
      std::vector<float> y(out, -7.0f), y_ref(out);
      conv_direct_forward(g, k.filters, weight.data(), b, image.data(), scratch.data(), y.data());
      conv2d_forward_naive(g, 1, k.filters, image.data(), weight.data(), b, y_ref.data());
      for (std::size_t i = 0; i < out; ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-5f) << "y[" << i << "]";
    }
  }
}

// With an addend the sums start from it: y = addend + bias + the convolution, for every case (the
// flat kernel of "same" convolutions and the row kernel of the others).
TEST(ConvDirect, ForwardStartsFromTheAddend) {
  std::uint64_t seed = 70;
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    if (!conv_direct_supported(g)) GTEST_SKIP() << "built without AVX-512";
    const auto image = random_values(k.channels * k.height * k.width, seed++);
    const auto weight = random_values(k.filters * g.col_rows(), seed++);
    const auto bias = random_values(k.filters, seed++);
    const auto out = static_cast<std::size_t>(k.filters * g.col_cols());
    const auto addend = random_values(static_cast<std::int64_t>(out), seed++);
    for (const bool with_bias : {true, false}) {
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<float> scratch(static_cast<std::size_t>(conv_direct_scratch_size(g)), 9.0f);
      std::vector<float> y(out, -7.0f), y_ref(out);
      conv_direct_forward(g, k.filters, weight.data(), b, image.data(), scratch.data(), y.data(),
                          addend.data());
      conv2d_forward_naive(g, 1, k.filters, image.data(), weight.data(), b, y_ref.data());
      for (std::size_t i = 0; i < out; ++i) {
        ASSERT_NEAR(y[i], y_ref[i] + addend[i], 1e-5f) << "y[" << i << "]";
      }
    }
  }
}

// The flat kernel of "same" convolutions (filters in groups of 8) on planes whose pixel count
// leaves a partial last pair of vectors (3x17: 51 pixels; 7x23: 161), kernels 3 and 5 wide, 8 to
// 24 filters.
TEST(ConvDirect, SameConvolutionsOnOddPlanesMatchNaive) {
  std::uint64_t seed = 90;
  for (const Case& k : std::vector<Case>{{2, 3, 17, 3, 3, 1, 16},
                                         {3, 7, 23, 3, 3, 1, 8},
                                         {2, 7, 23, 5, 5, 2, 24},
                                         {1, 1, 30, 3, 3, 1, 8}}) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    if (!conv_direct_supported(g)) GTEST_SKIP() << "built without AVX-512";
    ASSERT_EQ(g.col_cols(), k.height * k.width);  // "same": the flat kernel
    const auto image = random_values(k.channels * k.height * k.width, seed++);
    const auto weight = random_values(k.filters * g.col_rows(), seed++);
    const auto out = static_cast<std::size_t>(k.filters * g.col_cols());
    // Output and scratch start as garbage; the output has a guard past its end.
    std::vector<float> scratch(static_cast<std::size_t>(conv_direct_scratch_size(g)), 9.0f);
    std::vector<float> y(out + 64, -7.0f), y_ref(out);
    conv_direct_forward(g, k.filters, weight.data(), nullptr, image.data(), scratch.data(),
                        y.data());
    conv2d_forward_naive(g, 1, k.filters, image.data(), weight.data(), nullptr, y_ref.data());
    for (std::size_t i = 0; i < out; ++i) ASSERT_NEAR(y[i], y_ref[i], 1e-5f) << "y[" << i << "]";
    for (std::size_t i = out; i < y.size(); ++i) ASSERT_EQ(y[i], -7.0f) << "written past y";
  }
}

// Two images accumulated into one lanes buffer, folded into a gradient that starts at 0.5: the
// reference adds both images' products to 0.5 as well.
TEST(ConvDirect, WeightGradientAccumulatesOverImages) {
  std::uint64_t seed = 40;
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    if (!conv_direct_supported(g)) GTEST_SKIP() << "built without AVX-512";
    constexpr std::int64_t kImages = 2;
    const std::int64_t image_size = k.channels * k.height * k.width;
    const std::int64_t out_size = k.filters * g.col_cols();
    const std::int64_t weight_size = k.filters * g.col_rows();
    const auto images = random_values(kImages * image_size, seed++);
    const auto dy = random_values(kImages * out_size, seed++);
    const auto weight = random_values(weight_size, seed++);
    std::vector<float> scratch(static_cast<std::size_t>(conv_direct_scratch_size(g)), 9.0f);
    std::vector<float> lanes(static_cast<std::size_t>(weight_size * kConvDirectLanes), 0.0f);
    for (std::int64_t b = 0; b < kImages; ++b) {
      conv_direct_weight_grad(g, k.filters, dy.data() + b * out_size,
                              images.data() + b * image_size, scratch.data(), lanes.data());
    }
    std::vector<float> dw(static_cast<std::size_t>(weight_size), 0.5f), dw_ref = dw;
    conv_direct_reduce_lanes(weight_size, lanes.data(), dw.data());
    conv2d_backward_naive(g, kImages, k.filters, images.data(), weight.data(), dy.data(), nullptr,
                          dw_ref.data(), nullptr);
    for (std::size_t i = 0; i < dw.size(); ++i) {
      ASSERT_NEAR(dw[i], dw_ref[i], 2e-5f * (1.0f + std::fabs(dw_ref[i]))) << "dw[" << i << "]";
    }
  }
}

// lanes 1..16 and 16 copies of 0.25: the fold adds (l + l+8), then +4, +2, +1 to dw.
TEST(ConvDirect, ReduceLanesAddsEachRowToTheGradient) {
  std::vector<float> lanes(2 * kConvDirectLanes);
  for (std::int64_t l = 0; l < kConvDirectLanes; ++l) {
    lanes[static_cast<std::size_t>(l)] = static_cast<float>(l + 1);
    lanes[static_cast<std::size_t>(kConvDirectLanes + l)] = 0.25f;
  }
  std::vector<float> dw = {1.0f, -1.0f};
  conv_direct_reduce_lanes(2, lanes.data(), dw.data());
  EXPECT_EQ(dw, (std::vector<float>{1.0f + 136.0f, -1.0f + 4.0f}));  // 1 + ... + 16 = 136
}

}  // namespace
}  // namespace dtrain::tensor
