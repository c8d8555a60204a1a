#include "dtrain/nn/linear.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/tensor/gemm.h"
#include "blas_order.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using ::testing::HasSubstr;
using testing::random_tensor;

ForwardContext train_ctx() { return ForwardContext{}; }

TEST(LinearTest, DeclaresWeightAndBiasInPyTorchLayout) {
  Linear fc("fc", 7, 5);
  ParamStore store;
  bind_single_layer(fc, store);
  ASSERT_EQ(store.param_entries().size(), 2u);
  EXPECT_EQ(store.param_entries()[0].name, "fc.weight");
  EXPECT_EQ(store.param_entries()[0].shape, (tensor::Shape{5, 7}));
  EXPECT_TRUE(store.param_entries()[0].weight_decay);
  EXPECT_EQ(store.param_entries()[1].name, "fc.bias");
  EXPECT_EQ(store.param_entries()[1].shape, (tensor::Shape{5}));
  EXPECT_FALSE(store.param_entries()[1].weight_decay);
  EXPECT_EQ(fc.describe(), "Linear(7 -> 5)");
  // init: the bias starts at zero, the weight does not.
  for (float b : fc.bias().to_vector()) EXPECT_EQ(b, 0.0f);
  double weight_sq = 0.0;
  for (float w : fc.weight().to_vector()) weight_sq += static_cast<double>(w) * w;
  EXPECT_GT(weight_sq, 0.0);
}

// W = [[1, 2], [3, 4], [5, 6]], b = [0.5, -1, 2], x = [[1, -1], [2, 0.5]]:
//   y[0] = [1 - 2 + 0.5, 3 - 4 - 1, 5 - 6 + 2]   = [-0.5, -2, 1]
//   y[1] = [2 + 1 + 0.5, 6 + 2 - 1, 10 + 3 + 2]  = [3.5, 7, 15]
// With dy = all ones: db = [2, 2, 2], every row of dW = x[0] + x[1] = [3, -0.5],
// every row of dx = column sums of W = [9, 12].
TEST(LinearTest, ForwardAndBackwardByHand) {
  Linear fc("fc", 2, 3);
  ParamStore store;
  bind_single_layer(fc, store);
  const std::vector<float> w{1, 2, 3, 4, 5, 6};
  const std::vector<float> b{0.5f, -1, 2};
  std::copy(w.begin(), w.end(), store.params());
  std::copy(b.begin(), b.end(), store.params() + 6);
  const tensor::Tensor x = tensor::Tensor::from({2, 2}, {1, -1, 2, 0.5f});
  const tensor::Tensor& y = fc.forward(x, train_ctx());
  EXPECT_EQ(y.shape(), (tensor::Shape{2, 3}));
  EXPECT_EQ(y.to_vector(), (std::vector<float>{-0.5f, -2, 1, 3.5f, 7, 15}));

  store.zero_grads();
  tensor::Tensor dy = tensor::Tensor::zeros({2, 3});
  dy.fill(1.0f);
  const tensor::Tensor& dx = fc.backward(dy, true);
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{9, 12, 9, 12}));
  const std::vector<float> grads(store.grads(), store.grads() + store.num_params());
  EXPECT_EQ(grads, (std::vector<float>{3, -0.5f, 3, -0.5f, 3, -0.5f, 2, 2, 2}));
}

// The three products against naive double loops, on shapes with no factor in common (so any
// transposition or leading-dimension mix-up shows) and on a batch of one.
void expect_matches_naive(std::int64_t batch, std::int64_t in, std::int64_t out) {
  SCOPED_TRACE(::testing::Message() << "B=" << batch << " in=" << in << " out=" << out);
  Linear fc("fc", in, out);
  ParamStore store;
  bind_single_layer(fc, store, 11);
  // A non-zero bias, so that forward's bias term is checked too.
  for (std::int64_t o = 0; o < out; ++o) store.params()[out * in + o] = 0.1f * (o + 1);
  const tensor::Tensor x = random_tensor({batch, in}, 5);
  const tensor::Tensor dy = random_tensor({batch, out}, 6);
  const float* w = fc.weight().data();
  const float* b = fc.bias().data();

  const tensor::Tensor y = fc.forward(x, train_ctx()).clone();
  store.zero_grads();
  const tensor::Tensor dx = fc.backward(dy, true).clone();
  const float* dw = store.grads();
  const float* db = store.grads() + out * in;

  for (std::int64_t i = 0; i < batch; ++i) {
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = b[o];
      for (std::int64_t k = 0; k < in; ++k)
        sum += static_cast<double>(x.at({i, k})) * w[o * in + k];
      EXPECT_NEAR(y.at({i, o}), sum, 1e-5) << "y[" << i << "," << o << "]";
    }
  }
  for (std::int64_t o = 0; o < out; ++o) {
    double bias_sum = 0.0;
    for (std::int64_t i = 0; i < batch; ++i) bias_sum += dy.at({i, o});
    EXPECT_NEAR(db[o], bias_sum, 1e-5) << "db[" << o << "]";
    for (std::int64_t k = 0; k < in; ++k) {
      double sum = 0.0;
      for (std::int64_t i = 0; i < batch; ++i) {
        sum += static_cast<double>(dy.at({i, o})) * x.at({i, k});
      }
      EXPECT_NEAR(dw[o * in + k], sum, 1e-5) << "dW[" << o << "," << k << "]";
    }
  }
  for (std::int64_t i = 0; i < batch; ++i) {
    for (std::int64_t k = 0; k < in; ++k) {
      double sum = 0.0;
      for (std::int64_t o = 0; o < out; ++o)
        sum += static_cast<double>(dy.at({i, o})) * w[o * in + k];
      EXPECT_NEAR(dx.at({i, k}), sum, 1e-5) << "dx[" << i << "," << k << "]";
    }
  }
}

TEST(LinearTest, GemmPathMatchesNaiveLoops) {
  expect_matches_naive(3, 7, 5);
  expect_matches_naive(1, 7, 5);
  expect_matches_naive(1, 1, 1);
  expect_matches_naive(13, 31, 17);
  // out > B takes the transposed product (linear.h); out <= B the direct one.
  expect_matches_naive(20, 9, 6);
  expect_matches_naive(5, 33, 64);
}

// linear.h: with out > B forward computes y^T = W x^T + b and transposes it. Each output is the
// same sum in the same order as the direct product x W^T + b, so the two agree bit for bit, and a
// run's numbers do not depend on which path a batch size takes.
TEST(LinearTest, TransposedForwardIsBitwiseTheDirectProduct) {
  if (!testing_support::blas_sums_independent_of_call_shape()) {
    GTEST_SKIP() << "OpenBLAS's " << testing_support::blas_kernels_name()
                 << " kernels sum B A^T's outputs in another order than A B^T's";
  }
  for (const auto& [batch, in, out] :
       {std::array<std::int64_t, 3>{64, 784, 256}, {7, 100, 33}, {1, 256, 10}, {100, 120, 101}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << batch << " in=" << in << " out=" << out);
    ASSERT_GT(out, batch);
    Linear fc("fc", in, out);
    ParamStore store;
    bind_single_layer(fc, store, 3);
    for (std::int64_t o = 0; o < out; ++o) store.params()[out * in + o] = 0.01f * (o - 5);
    const tensor::Tensor x = random_tensor({batch, in}, 8);
    const std::vector<float> y = fc.forward(x, train_ctx()).to_vector();
    std::vector<float> direct(static_cast<std::size_t>(batch * out));
    for (std::int64_t i = 0; i < batch; ++i) {
      std::copy(fc.bias().data(), fc.bias().data() + out, direct.data() + i * out);
    }
    tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, batch, out, in, 1.0f, x.data(), in,
                 fc.weight().data(), in, 1.0f, direct.data(), out);
    EXPECT_EQ(y, direct);
  }
}

// forward_onto(x, r) = r + forward(x), on the direct path (B >= out) and the transposed one, and
// a residual of another shape is refused.
TEST(LinearTest, ForwardOntoAddsTheResidual) {
  for (const auto& [batch, in, out] :
       {std::array<std::int64_t, 3>{70, 24, 16}, {5, 12, 33}, {130, 40, 128}}) {
    SCOPED_TRACE(::testing::Message() << "B=" << batch << " in=" << in << " out=" << out);
    Linear fc("fc", in, out);
    ParamStore store;
    bind_single_layer(fc, store, 3);
    for (std::int64_t o = 0; o < out; ++o) store.params()[out * in + o] = 0.1f * (o - 5);
    const tensor::Tensor x = random_tensor({batch, in}, 8);
    const tensor::Tensor residual = random_tensor({batch, out}, 9, 3.0f);
    const std::vector<float> plain = fc.forward(x, train_ctx()).to_vector();
    const std::vector<float> onto = fc.forward_onto(x, residual, train_ctx()).to_vector();
    const std::vector<float> r = residual.to_vector();
    for (std::size_t i = 0; i < plain.size(); ++i) {
      ASSERT_NEAR(onto[i], r[i] + plain[i], 1e-6 * (1.0 + std::fabs(r[i]) + std::fabs(plain[i])))
          << i;
    }
    EXPECT_THAT(
        [&] {
          fc.forward_onto(x, random_tensor({batch, out + 1}, 1), train_ctx());
        },
        ::testing::ThrowsMessage<InternalError>(HasSubstr("residual shape")));
  }
}

TEST(LinearTest, BackwardAddsIntoTheGradientBufferAndSkipsDxWhenAsked) {
  Linear fc("fc", 4, 3);
  ParamStore store;
  bind_single_layer(fc, store);
  const tensor::Tensor x = random_tensor({2, 4}, 1);
  const tensor::Tensor dy = random_tensor({2, 3}, 2);
  store.zero_grads();
  fc.forward(x, train_ctx());
  fc.backward(dy, true);
  const std::vector<float> once(store.grads(), store.grads() + store.num_params());
  fc.forward(x, train_ctx());
  const tensor::Tensor& none = fc.backward(dy, /*need_input_grad=*/false);
  EXPECT_EQ(none.numel(), 0);
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    EXPECT_FLOAT_EQ(store.grads()[i], 2.0f * once[static_cast<std::size_t>(i)]) << i;
  }
}

TEST(LinearTest, ReusesItsOutputBufferAcrossSteps) {
  Linear fc("fc", 4, 3);
  ParamStore store;
  bind_single_layer(fc, store);
  const float* first = fc.forward(random_tensor({5, 4}, 1), train_ctx()).data();
  const float* second = fc.forward(random_tensor({5, 4}, 2), train_ctx()).data();
  EXPECT_EQ(first, second);
}

TEST(LinearTest, FiniteDifferenceGradients) {
  Linear fc("fc", 6, 4);
  ParamStore store;
  bind_single_layer(fc, store);
  check_layer_gradients(fc, store, random_tensor({3, 6}, 9));
}

TEST(LinearTest, WrongInputShapeNamesTheLayerAndBothShapes) {
  Linear fc("fc2", 256, 10);
  try {
    fc.output_shape({8, 255});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer fc2 (Linear(256 -> 10)) expects input [B, 256], got "
                                    "[B, 255]"));
  }
  try {
    fc.output_shape({8, 1, 16, 16});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("got [B, 1, 16, 16]"));
  }
  ParamStore store;
  bind_single_layer(fc, store);
  EXPECT_THROW(fc.forward(tensor::Tensor::zeros({2, 255}), train_ctx()), ShapeError);
  EXPECT_EQ(fc.output_shape({8, 256}), (tensor::Shape{8, 10}));
}

// (B, T, in) is B*T rows: the output, dx and the parameter gradients equal those of the same input
// viewed as (B*T, in), bit for bit.
TEST(LinearTest, LeadingDimensionsAreRows) {
  Linear fc("fc", 6, 5);
  ParamStore store;
  bind_single_layer(fc, store, 4);
  const tensor::Tensor x = random_tensor({2, 3, 6}, 1);
  const tensor::Tensor dy = random_tensor({2, 3, 5}, 2);
  EXPECT_EQ(fc.output_shape({2, 3, 6}), (tensor::Shape{2, 3, 5}));
  store.zero_grads();
  const std::vector<float> y3 = fc.forward(x, train_ctx()).to_vector();
  const tensor::Tensor dx3 = fc.backward(dy, true).clone();
  const std::vector<float> g3(store.grads(), store.grads() + store.num_params());
  store.zero_grads();
  EXPECT_EQ(fc.forward(x.reshape({6, 6}), train_ctx()).to_vector(), y3);
  EXPECT_EQ(fc.backward(dy.reshape({6, 5}), true).to_vector(), dx3.to_vector());
  EXPECT_EQ(dx3.shape(), (tensor::Shape{2, 3, 6}));
  EXPECT_EQ(std::vector<float>(store.grads(), store.grads() + store.num_params()), g3);
  check_layer_gradients(fc, store, random_tensor({2, 2, 6}, 9));
}

TEST(LinearTest, NonPositiveSizesAreAConfigError) {
  EXPECT_THROW(Linear("fc", 0, 3), ConfigError);
  EXPECT_THROW(Linear("fc", 3, -1), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
