// im2col / col2im and the stride-1 im2col_padded / col2im_padded against their naive twins on odd
// shapes, and col2im as the adjoint of im2col.
#include "dtrain/tensor/im2col.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/tensor/im2col_padded.h"
#include "random_values.h"

namespace dtrain::tensor {
namespace {

using dtrain::testing::random_values;

struct Case {
  std::int64_t c, h, w, kh, kw, stride, padding;
};

// Odd sizes, strides that do not divide the extent, padding as large as the kernel, 1x1 kernels,
// a kernel as large as the padded input, and a single output pixel.
const std::vector<Case> kCases = {
    {1, 5, 5, 3, 3, 1, 0},  {2, 7, 5, 3, 3, 2, 1}, {3, 6, 9, 2, 4, 3, 2},   {1, 1, 1, 1, 1, 1, 0},
    {2, 4, 3, 1, 1, 2, 0},  {1, 3, 3, 5, 5, 1, 1}, {6, 14, 14, 5, 5, 1, 0}, {1, 28, 28, 5, 5, 1, 2},
    {4, 9, 11, 3, 2, 2, 3}, {2, 5, 4, 3, 3, 4, 1},
};

ConvGeometry geometry(const Case& k) {
  ConvGeometry g;
  g.channels = k.c;
  g.height = k.h;
  g.width = k.w;
  g.kernel_h = k.kh;
  g.kernel_w = k.kw;
  g.stride = k.stride;
  g.padding = k.padding;
  return g;
}

TEST(Im2col, MatchesNaiveOnOddShapes) {
  std::uint64_t seed = 1;
  for (const Case& k : kCases) {
    const ConvGeometry g = geometry(k);
    ASSERT_GT(g.out_height(), 0);
    ASSERT_GT(g.out_width(), 0);
    const auto image = random_values(g.channels * g.height * g.width, seed++);
    const auto n = static_cast<std::size_t>(g.col_rows() * g.col_cols());
    std::vector<float> fast(n, 99.0f), naive(n, -99.0f);  // different garbage: all must be written
    im2col(g, image.data(), fast.data());
    im2col_naive(g, image.data(), naive.data());
    EXPECT_EQ(fast, naive) << "c=" << k.c << " h=" << k.h << " w=" << k.w << " k=" << k.kh << "x"
                           << k.kw << " s=" << k.stride << " p=" << k.padding;
  }
}

TEST(Im2col, Col2imMatchesNaiveAndAccumulates) {
  std::uint64_t seed = 100;
  for (const Case& k : kCases) {
    const ConvGeometry g = geometry(k);
    const auto cols = random_values(g.col_rows() * g.col_cols(), seed++);
    // Both start from the same non-zero image: col2im must add, not overwrite.
    const auto start = random_values(g.channels * g.height * g.width, seed++);
    std::vector<float> fast = start, naive = start;
    col2im(g, cols.data(), fast.data());
    col2im_naive(g, cols.data(), naive.data());
    ASSERT_EQ(fast.size(), naive.size());
    for (std::size_t i = 0; i < fast.size(); ++i) {
      EXPECT_NEAR(fast[i], naive[i], 1e-5f) << "pixel " << i << " s=" << k.stride;
    }
  }
}

// <im2col(x), c> == <x, col2im(c)>: col2im is the exact adjoint, which is what makes dx right.
TEST(Im2col, Col2imIsTheAdjoint) {
  const ConvGeometry g = geometry({2, 7, 5, 3, 3, 2, 1});
  const auto x = random_values(g.channels * g.height * g.width, 7);
  const auto c = random_values(g.col_rows() * g.col_cols(), 8);
  std::vector<float> cols(c.size());
  std::vector<float> back(x.size(), 0.0f);
  im2col(g, x.data(), cols.data());
  col2im(g, c.data(), back.data());
  double lhs = 0.0, rhs = 0.0;
  for (std::size_t i = 0; i < c.size(); ++i) lhs += static_cast<double>(cols[i]) * c[i];
  for (std::size_t i = 0; i < x.size(); ++i) rhs += static_cast<double>(x[i]) * back[i];
  EXPECT_NEAR(lhs, rhs, 1e-4);
}

// A hand-computed case: 1 channel 3x3 image 1..9, 2x2 kernel, stride 1, no padding.
// Output is 2x2; row (i=0, j=0) holds the top-left of each window: 1 2 4 5.
TEST(Im2col, HandComputed) {
  const ConvGeometry g = geometry({1, 3, 3, 2, 2, 1, 0});
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> cols(16);
  im2col(g, x.data(), cols.data());
  const std::vector<float> expected = {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9};
  EXPECT_EQ(cols, expected);
}

// Stride-1 geometries for the padded path: rows shorter than, equal to and longer than its 16-float
// block (OW = 1, 3, 10, 16, 17, 28, 33), padding 0 to larger than the kernel, several channels, a
// single output pixel, and LeNet's two layers; then 3x3 kernels with padding 1 on rows of at most
// 16 pixels (the in-register path: ResNet's 14x14 and 7x7 maps, odd sizes, one-pixel rows and
// columns) and just past it (17).
const std::vector<Case> kStrideOneCases = {
    {1, 5, 5, 3, 3, 1, 0},   {1, 1, 1, 1, 1, 1, 0},   {2, 3, 3, 3, 3, 1, 0},
    {3, 6, 9, 2, 4, 1, 2},   {6, 14, 14, 5, 5, 1, 0}, {1, 28, 28, 5, 5, 1, 2},
    {2, 16, 16, 1, 1, 1, 0}, {2, 5, 17, 1, 1, 1, 0},  {1, 3, 3, 5, 5, 1, 1},
    {4, 9, 33, 3, 2, 1, 3},  {2, 4, 1, 3, 1, 1, 1},   {32, 14, 14, 3, 3, 1, 1},
    {3, 7, 7, 3, 3, 1, 1},   {2, 5, 16, 3, 3, 1, 1},  {2, 3, 1, 3, 3, 1, 1},
    {1, 1, 9, 3, 3, 1, 1},   {2, 4, 17, 3, 3, 1, 1},
};

std::string case_str(const Case& k) {
  return "c=" + std::to_string(k.c) + " h=" + std::to_string(k.h) + " w=" + std::to_string(k.w) +
         " k=" + std::to_string(k.kh) + "x" + std::to_string(k.kw) +
         " p=" + std::to_string(k.padding);
}

// Bitwise equal to the naive twin (both only copy), every element written, and nothing written
// past cols: the 16-float blocks spill only into rows that are written after them.
TEST(Im2colPadded, MatchesNaiveBitwiseAndStaysInBounds) {
  constexpr std::size_t kGuard = 64;
  std::uint64_t seed = 500;
  for (const Case& k : kStrideOneCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    const auto image = random_values(g.channels * g.height * g.width, seed++);
    const auto n = static_cast<std::size_t>(g.col_rows() * g.col_cols());
    std::vector<float> fast(n + kGuard, 99.0f), naive(n, -99.0f);
    // Scratch starts as garbage: the padding must be zeroed by the call itself.
    std::vector<float> scratch(static_cast<std::size_t>(im2col_padded_scratch_size(g)), 7.0f);
    im2col_padded(g, image.data(), scratch.data(), fast.data());
    im2col_naive(g, image.data(), naive.data());
    for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(fast[i], naive[i]) << "cols[" << i << "]";
    for (std::size_t i = n; i < n + kGuard; ++i) ASSERT_EQ(fast[i], 99.0f) << "wrote past cols";
  }
}

// col2im_padded overwrites the image with what col2im_naive adds to a zeroed one; each pixel sums
// its contributions in the same (c, i, j) order, so the bits agree too.
TEST(Im2colPadded, Col2imMatchesNaiveAndOverwrites) {
  std::uint64_t seed = 600;
  for (const Case& k : kStrideOneCases) {
    SCOPED_TRACE(case_str(k));
    const ConvGeometry g = geometry(k);
    const auto cols = random_values(g.col_rows() * g.col_cols(), seed++);
    const auto size = static_cast<std::size_t>(g.channels * g.height * g.width);
    constexpr std::size_t kGuard = 64;
    std::vector<float> fast(size + kGuard, 123.0f), naive(size, 0.0f);
    std::vector<float> scratch(static_cast<std::size_t>(im2col_padded_scratch_size(g)), -5.0f);
    col2im_padded(g, cols.data(), scratch.data(), fast.data());
    col2im_naive(g, cols.data(), naive.data());
    EXPECT_EQ(std::vector<float>(fast.begin(), fast.begin() + static_cast<std::ptrdiff_t>(size)),
              naive);
    // Whole-vector row stores spill only into rows written after them, never past the image.
    for (std::size_t i = size; i < size + kGuard; ++i) ASSERT_EQ(fast[i], 123.0f) << "past image";
  }
}

TEST(Im2colPadded, RejectsStridesOtherThanOne) {
  const ConvGeometry g = geometry({1, 5, 5, 3, 3, 2, 0});
  std::vector<float> image(25), cols(static_cast<std::size_t>(g.col_rows() * g.col_cols()));
  std::vector<float> scratch(static_cast<std::size_t>(im2col_padded_scratch_size(g)));
  EXPECT_ANY_THROW(im2col_padded(g, image.data(), scratch.data(), cols.data()));
  EXPECT_ANY_THROW(col2im_padded(g, cols.data(), scratch.data(), image.data()));
}

// The hand-computed case of Im2col.HandComputed, through the padded path.
TEST(Im2colPadded, HandComputed) {
  const ConvGeometry g = geometry({1, 3, 3, 2, 2, 1, 0});
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  std::vector<float> cols(16);
  std::vector<float> scratch(static_cast<std::size_t>(im2col_padded_scratch_size(g)));
  im2col_padded(g, x.data(), scratch.data(), cols.data());
  const std::vector<float> expected = {1, 2, 4, 5, 2, 3, 5, 6, 4, 5, 7, 8, 5, 6, 8, 9};
  EXPECT_EQ(cols, expected);
}

}  // namespace
}  // namespace dtrain::tensor
