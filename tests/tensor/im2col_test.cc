// im2col / col2im against their naive twins on odd shapes, and col2im as the adjoint of im2col.
#include "dtrain/tensor/im2col.h"

#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/rng.h"

namespace dtrain::tensor {
namespace {

std::vector<float> random_values(std::int64_t n, std::uint64_t seed) {
  Rng rng(seed, 5);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = 2.0f * rng.uniform() - 1.0f;
  return v;
}

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

}  // namespace
}  // namespace dtrain::tensor
