// Conv2d: finite differences, the naive direct convolution (tensor/conv_reference.h) on odd shapes,
// thread-count independence, gradient accumulation, and shape errors.
#include "dtrain/nn/conv2d.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/conv_reference.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using testing::random_tensor;

struct ConvCase {
  std::int64_t batch, channels, height, width, filters, kernel, stride, padding;
  bool bias;
};

std::string case_str(const ConvCase& k) {
  return fmt::format("B={} C={} H={} W={} F={} K={} S={} P={} bias={}", k.batch, k.channels,
                     k.height, k.width, k.filters, k.kernel, k.stride, k.padding, k.bias);
}

// Odd sizes, strides that skip input columns, padding as wide as the kernel, 1x1 kernels, a kernel
// that covers the whole padded input (one output pixel), and no bias.
const std::vector<ConvCase> kCases = {
    {1, 2, 7, 5, 3, 3, 2, 1, true},  {3, 2, 7, 5, 3, 3, 2, 1, true}, {2, 1, 6, 6, 2, 3, 1, 0, true},
    {2, 3, 5, 7, 4, 1, 1, 0, false}, {2, 2, 6, 5, 3, 5, 1, 2, true}, {1, 2, 9, 8, 2, 2, 3, 0, true},
    {2, 3, 4, 3, 2, 3, 2, 3, false}, {3, 1, 3, 3, 2, 5, 1, 1, true},
};

tensor::ConvGeometry geometry(const ConvCase& k) {
  return tensor::ConvGeometry{k.channels, k.height, k.width,  k.kernel,
                              k.kernel,   k.stride, k.padding};
}

TEST(Conv2d, OutputShapeFollowsTheFormula) {
  Conv2d conv("conv", 3, 8, 5, 2, 1);
  // OH = (28 + 2 - 5) / 2 + 1 = 13, OW = (17 + 2 - 5) / 2 + 1 = 8.
  EXPECT_EQ(conv.output_shape({4, 3, 28, 17}), (tensor::Shape{4, 8, 13, 8}));
  Conv2d lenet1("conv1", 1, 6, 5, 1, 2);
  EXPECT_EQ(lenet1.output_shape({128, 1, 28, 28}), (tensor::Shape{128, 6, 28, 28}));
}

TEST(Conv2d, FiniteDifferences) {
  std::uint64_t seed = 11;
  for (const ConvCase& k : kCases) {
    SCOPED_TRACE(case_str(k));
    Conv2d conv("conv", k.channels, k.filters, k.kernel, k.stride, k.padding, k.bias,
                InitKind::kXavier);
    ParamStore store;
    bind_single_layer(conv, store, seed);
    if (k.bias) {  // non-zero biases, so that a bias mix-up shows
      tensor::Tensor b = conv.bias();
      for (std::int64_t f = 0; f < k.filters; ++f) b.data()[f] = 0.1f * static_cast<float>(f + 1);
    }
    const tensor::Tensor x = random_tensor({k.batch, k.channels, k.height, k.width}, seed++);
    check_layer_gradients(conv, store, x);
  }
}

// Forward and backward against the direct convolution, for 1 and 2 compute threads.
class Conv2dThreads : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { set_compute_threads(GetParam()); }
  void TearDown() override { set_compute_threads(1); }
};

TEST_P(Conv2dThreads, MatchesDirectConvolution) {
  std::uint64_t seed = 300;
  // The cases above (im2col + GEMM) plus LeNet's two layers at a small batch (large enough to split
  // the batch), the first through tensor/conv_direct.h, and two more conv_direct shapes: a
  // CIFAR-like first layer and 7 filters (partial groups) without bias.
  std::vector<ConvCase> cases = kCases;
  cases.push_back({5, 1, 28, 28, 6, 5, 1, 2, true});
  cases.push_back({6, 6, 14, 14, 16, 5, 1, 0, true});
  cases.push_back({3, 3, 32, 32, 6, 5, 1, 0, true});
  cases.push_back({2, 2, 9, 20, 7, 3, 1, 1, false});
  // ResNet's first stage (16 -> 16, 3x3, padding 1, 28x28): forward with 8 filters a step, the
  // weight gradient with 4 filters x 3 shifts, dx through conv_direct with the flipped kernel;
  // 3 -> 8 at OW 17 (dx with 3 output channels: a partial group); padding 3 > K - 1, whose dx
  // stays with GEMM + col2im.
  cases.push_back({2, 16, 28, 28, 16, 3, 1, 1, false});
  cases.push_back({3, 3, 17, 17, 8, 3, 1, 1, true});
  cases.push_back({2, 2, 10, 18, 4, 3, 1, 3, true});
  for (const ConvCase& k : cases) {
    SCOPED_TRACE(case_str(k));
    Conv2d conv("conv", k.channels, k.filters, k.kernel, k.stride, k.padding, k.bias);
    ParamStore store;
    bind_single_layer(conv, store, seed++);
    if (k.bias) {
      tensor::Tensor b = conv.bias();
      b.data()[0] = 0.5f;
    }
    const tensor::Tensor x = random_tensor({k.batch, k.channels, k.height, k.width}, seed++);
    const tensor::ConvGeometry g = geometry(k);
    const tensor::Shape y_shape = conv.output_shape(x.shape());

    const tensor::Tensor y = conv.forward(x, ForwardContext{}).clone();
    tensor::Tensor y_ref = tensor::Tensor::zeros(y_shape);
    tensor::conv2d_forward_naive(g, k.batch, k.filters, x.data(), conv.weight().data(),
                                 k.bias ? conv.bias().data() : nullptr, y_ref.data());
    ASSERT_EQ(y.shape(), y_ref.shape());
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      ASSERT_NEAR(y.data()[i], y_ref.data()[i], 1e-4f) << "y[" << i << "]";
    }

    // Gradients start non-zero: backward must add to them.
    const tensor::Tensor dy = random_tensor(y_shape, seed++);
    for (std::int64_t i = 0; i < store.num_params(); ++i) store.grads()[i] = 0.25f;
    const tensor::Tensor dx = conv.backward(dy, true).clone();
    std::vector<float> dw_ref(static_cast<std::size_t>(conv.weight().numel()), 0.25f);
    std::vector<float> db_ref(static_cast<std::size_t>(k.filters), 0.25f);
    tensor::Tensor dx_ref = tensor::Tensor::zeros(x.shape());
    tensor::conv2d_backward_naive(g, k.batch, k.filters, x.data(), conv.weight().data(), dy.data(),
                                  dx_ref.data(), dw_ref.data(), k.bias ? db_ref.data() : nullptr);
    for (std::int64_t i = 0; i < dx.numel(); ++i) {
      ASSERT_NEAR(dx.data()[i], dx_ref.data()[i], 1e-4f) << "dx[" << i << "]";
    }
    const float* dw = store.grads();  // weight first, then bias, in declaration order
    for (std::size_t i = 0; i < dw_ref.size(); ++i) {
      ASSERT_NEAR(dw[i], dw_ref[i], 2e-4f * (1.0f + std::fabs(dw_ref[i]))) << "dw[" << i << "]";
    }
    if (k.bias) {
      const float* db = dw + dw_ref.size();
      for (std::size_t f = 0; f < db_ref.size(); ++f) {
        ASSERT_NEAR(db[f], db_ref[f], 2e-4f * (1.0f + std::fabs(db_ref[f]))) << "db[" << f << "]";
      }
    } else {
      EXPECT_EQ(store.num_params(), conv.weight().numel());
    }
  }
}

// 3 threads cut LeNet's conv1 batch of 5 images into uneven parts (1 + 2 + 2).
// backward_add(dy, addend) is backward(dy, true) with the addend added into dx (a residual block's
// sum of branches): the same weight gradients bit for bit; dx bit for bit backward's dx + addend
// where dx goes through GEMM + col2im (added after col2im), and within rounding of it where the
// direct dx kernel starts its sums from the addend (ResNet's 16 -> 16 at 28x28, LeNet's conv1
// shape). Cases: those two, the stride-2 3x3 and 1x1 layers entering a ResNet stage, a 3x3 on
// 14x14 maps (col2im_padded) and a stride-1 layer whose padding keeps it on GEMM.
TEST_P(Conv2dThreads, BackwardAddAddsTheAddendIntoDx) {
  std::uint64_t seed = 700;
  const std::vector<ConvCase> cases = {
      {3, 16, 28, 28, 16, 3, 1, 1, false}, {3, 1, 28, 28, 6, 5, 1, 2, true},
      {3, 16, 28, 28, 32, 3, 2, 1, false}, {3, 16, 28, 28, 32, 1, 2, 0, false},
      {3, 32, 14, 14, 32, 3, 1, 1, false}, {2, 2, 10, 18, 4, 3, 1, 3, true},
  };
  for (const ConvCase& k : cases) {
    SCOPED_TRACE(case_str(k));
    Conv2d conv("conv", k.channels, k.filters, k.kernel, k.stride, k.padding, k.bias);
    ParamStore store;
    bind_single_layer(conv, store, seed++);
    const tensor::Tensor x = random_tensor({k.batch, k.channels, k.height, k.width}, seed++);
    const tensor::Tensor addend = random_tensor(x.shape(), seed++);
    const tensor::Tensor dy = random_tensor(conv.output_shape(x.shape()), seed++);
    conv.forward(x, ForwardContext{});
    store.zero_grads();
    const tensor::Tensor dx = conv.backward(dy, true).clone();
    const std::vector<float> grads(store.grads(), store.grads() + store.num_params());
    store.zero_grads();
    const tensor::Tensor& sum = conv.backward_add(dy, addend);
    ASSERT_EQ(sum.shape(), x.shape());
    EXPECT_EQ(std::vector<float>(store.grads(), store.grads() + store.num_params()), grads);
    // ResNet's 16 -> 16 and LeNet's 1 -> 6 take the direct dx kernel (rows of 17 to 32 pixels,
    // stride 1, P <= K - 1); the others GEMM + col2im.
    const bool direct = k.stride == 1 && k.width > 16 && k.padding <= k.kernel - 1;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      const float expected = dx.data()[i] + addend.data()[i];
      if (direct) {
        ASSERT_NEAR(sum.data()[i], expected, 1e-5f * (1.0f + std::fabs(expected))) << i;
      } else {
        ASSERT_EQ(sum.data()[i], expected) << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Threads, Conv2dThreads, ::testing::Values(1, 2, 3));

// Repeating a step gives the same bits; 1 and 2 threads agree to rounding. Not asserted bitwise:
// tensor::gemm slices large products over threads, and OpenBLAS 0.3.21 can sum a slice in another
// order than the whole (its small-matrix kernel; reproduced at m = 6, n = 25, k = 12544).
// Tolerance: dW sums 16 * 784 products per element.
TEST(Conv2d, DeterministicAndThreadCountIndependent) {
  auto run = [](int threads) {
    set_compute_threads(threads);
    Conv2d conv("conv1", 1, 6, 5, 1, 2);
    ParamStore store;
    bind_single_layer(conv, store, 5);
    const tensor::Tensor x = random_tensor({16, 1, 28, 28}, 6);
    std::vector<float> out = conv.forward(x, ForwardContext{}).to_vector();
    const tensor::Tensor dy = random_tensor({16, 6, 28, 28}, 7);
    const std::vector<float> dx = conv.backward(dy, true).to_vector();
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), store.grads(), store.grads() + store.num_params());
    set_compute_threads(1);
    return out;
  };
  EXPECT_EQ(run(1), run(1));
  EXPECT_EQ(run(2), run(2));
  const auto one = run(1), two = run(2);
  ASSERT_EQ(one.size(), two.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    ASSERT_NEAR(one[i], two[i], 2e-4f * (1.0f + std::fabs(one[i]))) << "element " << i;
  }
}

TEST(Conv2d, BackwardAccumulatesAndSkipsInputGradient) {
  Conv2d conv("conv", 2, 3, 3, 1, 1);
  ParamStore store;
  bind_single_layer(conv, store);
  const tensor::Tensor x = random_tensor({2, 2, 5, 5}, 1);
  const tensor::Tensor dy = random_tensor({2, 3, 5, 5}, 2);
  conv.forward(x, ForwardContext{});
  store.zero_grads();
  EXPECT_EQ(conv.backward(dy, /*need_input_grad=*/false).numel(), 0);
  const std::vector<float> once(store.grads(), store.grads() + store.num_params());
  conv.backward(dy, false);
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    EXPECT_FLOAT_EQ(store.grads()[i], 2.0f * once[static_cast<std::size_t>(i)]) << i;
  }
}

TEST(Conv2d, DeclaresWeightAndOptionalBias) {
  Conv2d with("c1", 3, 4, 3);
  Conv2d without("c2", 4, 5, 1, 1, 0, /*bias=*/false);
  ParamStore store;
  with.declare(store);
  without.declare(store);
  store.finalize();
  ASSERT_EQ(store.param_entries().size(), 3u);
  EXPECT_EQ(store.param_entries()[0].name, "c1.weight");
  EXPECT_EQ(store.param_entries()[0].shape, (tensor::Shape{4, 3, 3, 3}));
  EXPECT_TRUE(store.param_entries()[0].weight_decay);
  EXPECT_EQ(store.param_entries()[1].name, "c1.bias");
  EXPECT_FALSE(store.param_entries()[1].weight_decay);
  EXPECT_EQ(store.param_entries()[2].name, "c2.weight");
  EXPECT_EQ(store.num_params(), 4 * 27 + 4 + 5 * 4);
}

TEST(Conv2d, HeInitHasTheRightScale) {
  Conv2d conv("conv", 8, 64, 3);
  ParamStore store;
  bind_single_layer(conv, store);
  double sum_sq = 0.0;
  for (std::int64_t i = 0; i < conv.weight().numel(); ++i) {
    sum_sq += static_cast<double>(conv.weight().data()[i]) * conv.weight().data()[i];
  }
  // std = sqrt(2 / (8 * 9)) = 0.1667; 4608 draws estimate the variance within a few percent.
  EXPECT_NEAR(std::sqrt(sum_sq / static_cast<double>(conv.weight().numel())), 0.1667, 0.01);
  EXPECT_EQ(conv.bias().data()[0], 0.0f);
}

TEST(Conv2d, ShapeErrorsNameTheLayerAndShapes) {
  Conv2d conv("conv2", 6, 16, 5);
  EXPECT_THAT(
      [&] {
        conv.output_shape({8, 3, 14, 14});
      },
      ::testing::ThrowsMessage<ShapeError>(
          ::testing::AllOf(::testing::HasSubstr("conv2"), ::testing::HasSubstr("[B, 6, H, W]"),
                           ::testing::HasSubstr("[B, 3, 14, 14]"))));
  EXPECT_THAT(
      [&] {
        conv.output_shape({8, 6, 4, 9});
      },
      ::testing::ThrowsMessage<ShapeError>(::testing::AllOf(::testing::HasSubstr("conv2"),
                                                            ::testing::HasSubstr("5x5"),
                                                            ::testing::HasSubstr("4x9"))));
  EXPECT_THROW(conv.output_shape({8, 6 * 14 * 14}), ShapeError);
  EXPECT_THROW(Conv2d("bad", 1, 1, 3, 0), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
