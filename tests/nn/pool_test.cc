// MaxPool2d and AvgPool2d: hand-computed values, finite differences, max-pool ties and NaNs against
// a naive twin (both the 2x2 stride-2 path and the general one), global pool.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <numeric>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/max_pool2d.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::check_layer_gradients;
using testing::random_tensor;

// Distinct values 0.05 apart in a random order: no two inputs of a window are within 2h of each
// other for the finite-difference step h = 0.01, so no perturbation changes which one is largest.
tensor::Tensor tie_free_tensor(const tensor::Shape& shape, std::uint64_t seed) {
  tensor::Tensor t = tensor::Tensor::empty(shape);
  std::vector<std::int64_t> order(static_cast<std::size_t>(t.numel()));
  std::iota(order.begin(), order.end(), 0);
  Rng rng(seed, 1);
  for (std::size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[static_cast<std::size_t>(rng.below(i))]);
  }
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    t.data()[i] = 0.05f * static_cast<float>(order[static_cast<std::size_t>(i)] - t.numel() / 2);
  }
  return t;
}

struct PoolCase {
  std::int64_t batch, channels, height, width, kernel, stride;
};

// Non-overlapping, overlapping (S < K), gapped (S > K) windows and odd sizes that drop edges.
const std::vector<PoolCase> kCases = {
    {2, 3, 4, 4, 2, 2}, {1, 2, 7, 5, 3, 2}, {2, 1, 9, 8, 2, 3},
    {3, 2, 5, 5, 3, 1}, {1, 1, 6, 7, 6, 1},
};

TEST(MaxPool2d, HandComputed) {
  MaxPool2d pool("pool", 2, 2);
  // One 4x4 plane; windows (top-left, top-right, bottom-left, bottom-right).
  const tensor::Tensor x = tensor::Tensor::from({1, 1, 4, 4}, {1, 5, 2, 0,    //
                                                               3, 4, 8, 1,    //
                                                               0, 0, -1, -2,  //
                                                               9, 0, -3, -4});
  const tensor::Tensor& y = pool.forward(x, ForwardContext{});
  EXPECT_EQ(y.shape(), (tensor::Shape{1, 1, 2, 2}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{5, 8, 9, -1}));
  EXPECT_EQ(pool.argmax(), (std::vector<std::int32_t>{1, 6, 12, 10}));
  const tensor::Tensor dy = tensor::Tensor::from({1, 1, 2, 2}, {10, 20, 30, 40});
  const std::vector<float> dx = pool.backward(dy, true).to_vector();
  std::vector<float> expected(16, 0.0f);
  expected[1] = 10;
  expected[6] = 20;
  expected[12] = 30;
  expected[10] = 40;
  EXPECT_EQ(dx, expected);
}

TEST(MaxPool2d, FiniteDifferencesWithoutTies) {
  std::uint64_t seed = 1;
  for (const PoolCase& k : kCases) {
    SCOPED_TRACE(::testing::Message()
                 << "H=" << k.height << " W=" << k.width << " K=" << k.kernel << " S=" << k.stride);
    MaxPool2d pool("pool", k.kernel, k.stride);
    ParamStore store;
    store.finalize();
    check_layer_gradients(pool, store,
                          tie_free_tensor({k.batch, k.channels, k.height, k.width}, seed++));
  }
}

// Ties: the first maximum in row-major window order takes the whole gradient, and overlapping
// windows that pick the same input add up there.
TEST(MaxPool2d, TiesGoToTheFirstMaximum) {
  MaxPool2d pool("pool", 2, 1);
  const tensor::Tensor x = tensor::Tensor::from({1, 1, 3, 3}, {7, 7, 1,  //
                                                               7, 7, 7,  //
                                                               2, 7, 3});
  const tensor::Tensor& y = pool.forward(x, ForwardContext{});
  EXPECT_EQ(y.to_vector(), (std::vector<float>{7, 7, 7, 7}));
  // Windows at (0,0), (0,1), (1,0), (1,1): first 7 in each is at 0, 1, 3, 4.
  EXPECT_EQ(pool.argmax(), (std::vector<std::int32_t>{0, 1, 3, 4}));
  const tensor::Tensor dy = tensor::Tensor::from({1, 1, 2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(pool.backward(dy, true).to_vector(), (std::vector<float>{1, 2, 0, 3, 4, 0, 0, 0, 0}));

  // A constant plane: every window takes its top-left input.
  MaxPool2d pool2("pool2", 2, 2);
  const tensor::Tensor flat = tensor::Tensor::from({1, 1, 2, 4}, std::vector<float>(8, 0.5f));
  pool2.forward(flat, ForwardContext{});
  EXPECT_EQ(pool2.argmax(), (std::vector<std::int32_t>{0, 2}));
}

// The reference twin of MaxPool2d::forward: one window at a time with explicit branches; the first
// maximum in row-major order wins, and the first NaN wins and stays.
void max_pool_naive(const tensor::Tensor& x, std::int64_t kernel, std::int64_t stride,
                    std::vector<float>& y, std::vector<std::int32_t>& arg) {
  const std::int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const std::int64_t oh_count = (h - kernel) / stride + 1, ow_count = (w - kernel) / stride + 1;
  y.clear();
  arg.clear();
  for (std::int64_t p = 0; p < planes; ++p) {
    const float* in = x.data() + p * h * w;
    for (std::int64_t oh = 0; oh < oh_count; ++oh) {
      for (std::int64_t ow = 0; ow < ow_count; ++ow) {
        std::int64_t best = -1;
        for (std::int64_t i = 0; i < kernel; ++i) {
          for (std::int64_t j = 0; j < kernel; ++j) {
            const std::int64_t at = (oh * stride + i) * w + ow * stride + j;
            if (best < 0) {
              best = at;
            } else if (std::isnan(in[best])) {
              continue;
            } else if (std::isnan(in[at]) || in[at] > in[best]) {
              best = at;
            }
          }
        }
        y.push_back(in[best]);
        arg.push_back(static_cast<std::int32_t>(best));
      }
    }
  }
}

// The unrolled 2x2 stride-2 path and the general path against the naive twin, on values drawn from
// a few levels (so ties are common), NaNs sprinkled in, odd sizes that drop an edge row/column, and
// rows of more than 16 windows (the vector path's several steps per row, a last step of 1 window).
TEST(MaxPool2d, MatchesNaiveWithTiesAndNaNs) {
  const std::vector<PoolCase> cases = {
      {2, 3, 28, 28, 2, 2}, {3, 2, 10, 10, 2, 2}, {2, 2, 7, 9, 2, 2},  {1, 3, 5, 3, 2, 2},
      {2, 2, 7, 5, 3, 2},   {1, 2, 8, 8, 2, 1},   {2, 1, 9, 8, 2, 3},  {1, 1, 6, 7, 6, 1},
      {1, 2, 5, 40, 2, 2},  {1, 1, 4, 66, 2, 2},  {2, 1, 3, 35, 2, 2}, {1, 1, 2, 2, 2, 2}};
  Rng rng(77, 3);
  for (const PoolCase& k : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "H=" << k.height << " W=" << k.width << " K=" << k.kernel << " S=" << k.stride);
    tensor::Tensor x = tensor::Tensor::empty({k.batch, k.channels, k.height, k.width});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const auto level = rng.below(5);
      x.data()[i] = level == 4 && rng.below(8) == 0 ? std::nanf("") : static_cast<float>(level);
    }
    MaxPool2d pool("pool", k.kernel, k.stride);
    const std::vector<float> y = pool.forward(x, ForwardContext{}).to_vector();
    std::vector<float> y_ref;
    std::vector<std::int32_t> arg_ref;
    max_pool_naive(x, k.kernel, k.stride, y_ref, arg_ref);
    ASSERT_EQ(pool.argmax(), arg_ref);
    ASSERT_EQ(y.size(), y_ref.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      if (std::isnan(y_ref[i])) {
        EXPECT_TRUE(std::isnan(y[i])) << i;
      } else {
        EXPECT_EQ(y[i], y_ref[i]) << i;
      }
    }
  }
}

// Backward against its naive twin: dx zeroed, then dy added at each recorded argmax; bitwise, on
// the shapes above (ties, NaNs, dropped edges), with dy holding a -0, which the scatter turns into
// +0.
TEST(MaxPool2d, BackwardMatchesNaiveScatter) {
  const std::vector<PoolCase> cases = {
      {2, 3, 28, 28, 2, 2}, {3, 2, 10, 10, 2, 2}, {2, 2, 7, 9, 2, 2}, {1, 2, 5, 40, 2, 2},
      {2, 1, 3, 35, 2, 2},  {2, 2, 7, 5, 3, 2},   {1, 2, 8, 8, 2, 1}};
  Rng rng(78, 3);
  for (const PoolCase& k : cases) {
    SCOPED_TRACE(::testing::Message()
                 << "H=" << k.height << " W=" << k.width << " K=" << k.kernel << " S=" << k.stride);
    tensor::Tensor x = tensor::Tensor::empty({k.batch, k.channels, k.height, k.width});
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const auto level = rng.below(5);
      x.data()[i] = level == 4 && rng.below(8) == 0 ? std::nanf("") : static_cast<float>(level);
    }
    MaxPool2d pool("pool", k.kernel, k.stride);
    const tensor::Shape y_shape = pool.forward(x, ForwardContext{}).shape();
    tensor::Tensor dy = random_tensor(y_shape, 5);
    dy.data()[0] = -0.0f;
    const std::vector<float> dx = pool.backward(dy, true).to_vector();
    const std::int64_t plane_in = k.height * k.width, plane_out = y_shape[2] * y_shape[3];
    std::vector<float> dx_ref(static_cast<std::size_t>(x.numel()), 0.0f);
    for (std::int64_t o = 0; o < dy.numel(); ++o) {
      const std::int64_t plane = o / plane_out;
      dx_ref[static_cast<std::size_t>(plane * plane_in +
                                      pool.argmax()[static_cast<std::size_t>(o)])] += dy.data()[o];
    }
    ASSERT_EQ(dx.size(), dx_ref.size());
    for (std::size_t i = 0; i < dx.size(); ++i) {
      ASSERT_EQ(std::bit_cast<std::uint32_t>(dx[i]), std::bit_cast<std::uint32_t>(dx_ref[i]))
          << "dx[" << i << "] = " << dx[i] << ", naive " << dx_ref[i];
    }
  }
}

TEST(MaxPool2d, BackwardCanSkipInputGradient) {
  MaxPool2d pool("pool", 2, 2);
  const tensor::Tensor x = random_tensor({1, 1, 4, 4}, 3);
  pool.forward(x, ForwardContext{});
  EXPECT_EQ(pool.backward(random_tensor({1, 1, 2, 2}, 4), false).numel(), 0);
}

TEST(AvgPool2d, HandComputed) {
  AvgPool2d pool("pool", 2, 2);
  const tensor::Tensor x = tensor::Tensor::from({1, 1, 2, 5}, {1, 2, 3, 4, 100,  //
                                                               5, 6, 7, 8, 100});
  // The 5th column does not fit a window and is dropped: (1+2+5+6)/4 = 3.5, (3+4+7+8)/4 = 5.5.
  EXPECT_EQ(pool.forward(x, ForwardContext{}).to_vector(), (std::vector<float>{3.5f, 5.5f}));
  const tensor::Tensor dy = tensor::Tensor::from({1, 1, 1, 2}, {4, 8});
  EXPECT_EQ(pool.backward(dy, true).to_vector(),
            (std::vector<float>{1, 1, 2, 2, 0, 1, 1, 2, 2, 0}));
}

TEST(AvgPool2d, FiniteDifferences) {
  std::uint64_t seed = 50;
  for (const PoolCase& k : kCases) {
    AvgPool2d pool("pool", k.kernel, k.stride);
    ParamStore store;
    store.finalize();
    check_layer_gradients(pool, store,
                          random_tensor({k.batch, k.channels, k.height, k.width}, seed++));
  }
  auto global = AvgPool2d::global("gap");
  ParamStore store;
  store.finalize();
  check_layer_gradients(*global, store, random_tensor({2, 3, 5, 7}, seed));
}

TEST(AvgPool2d, GlobalAveragesEachPlane) {
  auto pool = AvgPool2d::global("gap");
  EXPECT_TRUE(pool->is_global());
  EXPECT_EQ(pool->output_shape({4, 64, 7, 7}), (tensor::Shape{4, 64, 1, 1}));
  EXPECT_EQ(pool->output_shape({4, 64, 8, 3}), (tensor::Shape{4, 64, 1, 1}));
  // Two planes of 2x3: means 3.5 and -1.
  const tensor::Tensor x =
      tensor::Tensor::from({1, 2, 2, 3}, {1, 2, 3, 4, 5, 6, -1, -1, -1, -1, -1, -1});
  EXPECT_EQ(pool->forward(x, ForwardContext{}).to_vector(), (std::vector<float>{3.5f, -1.0f}));
  const tensor::Tensor dy = tensor::Tensor::from({1, 2, 1, 1}, {6, 12});
  EXPECT_EQ(pool->backward(dy, true).to_vector(),
            (std::vector<float>{1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2}));
}

TEST(Pool, ShapeErrorsNameTheLayer) {
  MaxPool2d max_pool("pool2", 2, 2);
  EXPECT_EQ(max_pool.output_shape({8, 16, 10, 10}), (tensor::Shape{8, 16, 5, 5}));
  EXPECT_EQ(max_pool.output_shape({8, 16, 7, 5}), (tensor::Shape{8, 16, 3, 2}));
  EXPECT_THAT(
      [&] {
        max_pool.output_shape({8, 16, 1, 10});
      },
      ::testing::ThrowsMessage<ShapeError>(
          ::testing::AllOf(::testing::HasSubstr("pool2"), ::testing::HasSubstr("1x10"))));
  EXPECT_THROW(max_pool.output_shape({8, 400}), ShapeError);
  AvgPool2d avg_pool("avg", 3, 1);
  EXPECT_THROW(avg_pool.output_shape({8, 2, 2, 5}), ShapeError);
  EXPECT_THROW(MaxPool2d("bad", 0, 1), ConfigError);
  EXPECT_THROW(AvgPool2d("bad", 2, 0), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
