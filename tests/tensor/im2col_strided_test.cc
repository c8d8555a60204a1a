// im2col_strided / col2im_strided (phase planes, nn::Conv2d's strided layers) against the naive
// twins of im2col.h and, bit for bit, against im2col / col2im: odd sizes, strides 2 to 4 that do
// not divide the extent, padding 0 to 3 (wider than the kernel's reach), 1x1 kernels, rows longer
// than one 16-float vector, and a ResNet's two stride-2 layers.
#include "dtrain/tensor/im2col_strided.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

struct Case {
  std::int64_t c, h, w, kh, kw, stride, padding;
};

// 1x1, stride 2, no padding and 3x3, stride 2, padding 1 with rows of at most 32 pixels have
// direct gathers: odd heights and widths, rows of 17 to 32 and over 32 floats, a single column.
const std::vector<Case> kCases = {
    {16, 28, 28, 3, 3, 2, 1}, {16, 28, 28, 1, 1, 2, 0}, {32, 14, 14, 3, 3, 2, 1},
    {2, 7, 5, 3, 3, 2, 1},    {3, 6, 9, 2, 4, 3, 2},    {2, 4, 3, 1, 1, 2, 0},
    {4, 9, 11, 3, 2, 2, 3},   {2, 5, 4, 3, 3, 4, 1},    {1, 40, 41, 3, 3, 2, 1},
    {1, 3, 3, 3, 3, 2, 1},    {2, 8, 8, 3, 3, 1, 1},    {3, 7, 37, 1, 1, 2, 0},
    {2, 9, 33, 1, 1, 2, 0},   {2, 5, 1, 1, 1, 2, 0},    {32, 14, 14, 1, 1, 2, 0},
    {3, 9, 31, 3, 3, 2, 1},   {2, 6, 32, 3, 3, 2, 1},   {2, 5, 17, 3, 3, 2, 1},
    {1, 2, 1, 3, 3, 2, 1},    {2, 8, 33, 3, 3, 2, 1},
};

std::string case_str(const Case& k) {
  return "C=" + std::to_string(k.c) + " H=" + std::to_string(k.h) + " W=" + std::to_string(k.w) +
         " K=" + std::to_string(k.kh) + "x" + std::to_string(k.kw) +
         " S=" + std::to_string(k.stride) + " P=" + std::to_string(k.padding);
}

ConvGeometry geometry(const Case& k) {
  return ConvGeometry{k.c, k.h, k.w, k.kh, k.kw, k.stride, k.padding};
}

TEST(Im2colStrided, EqualsTheNaiveTwinAndIm2colBitForBit) {
  std::uint64_t seed = 1;
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    const auto image = random_values(k.c * k.h * k.w, seed++);
    const auto size = static_cast<std::size_t>(g.col_rows() * g.col_cols());
    // Scratch and output start as garbage: the call must write all of cols.
    std::vector<float> scratch(static_cast<std::size_t>(im2col_strided_scratch_size(g)), 5.0f);
    std::vector<float> cols(size, -3.0f), naive(size), fast(size);
    im2col_strided(g, image.data(), scratch.data(), cols.data());
    im2col_naive(g, image.data(), naive.data());
    im2col(g, image.data(), fast.data());
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_EQ(cols[i], naive[i]) << "cols[" << i << "]";
      ASSERT_EQ(cols[i], fast[i]) << "cols[" << i << "]";
    }
  }
}

TEST(Col2imStrided, EqualsTheNaiveTwinAndCol2imBitForBit) {
  std::uint64_t seed = 100;
  for (const Case& k : kCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    const auto cols = random_values(g.col_rows() * g.col_cols(), seed++);
    const auto size = static_cast<std::size_t>(k.c * k.h * k.w);
    std::vector<float> scratch(static_cast<std::size_t>(im2col_strided_scratch_size(g)), 5.0f);
    // The image starts as garbage: col2im_strided overwrites it, the others add to zeros.
    std::vector<float> image(size, 7.0f), naive(size, 0.0f), fast(size, 0.0f);
    col2im_strided(g, cols.data(), scratch.data(), image.data());
    col2im_naive(g, cols.data(), naive.data());
    col2im(g, cols.data(), fast.data());
    for (std::size_t i = 0; i < size; ++i) {
      ASSERT_FLOAT_EQ(image[i], naive[i]) << "image[" << i << "]";
      ASSERT_EQ(image[i], fast[i]) << "image[" << i << "]";
    }
  }
}

}  // namespace
}  // namespace dtrain::tensor
