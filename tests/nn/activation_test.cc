#include "dtrain/nn/activation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using ::testing::HasSubstr;
using testing::random_tensor;

constexpr float kAlpha = 0.2f;

const std::vector<ActivationKind> kAllKinds{ActivationKind::kSigmoid,   ActivationKind::kTanh,
                                            ActivationKind::kRelu,      ActivationKind::kSoftplus,
                                            ActivationKind::kLeakyRelu, ActivationKind::kElu,
                                            ActivationKind::kGelu};

// Reference values in double, straight from the definitions (no stabilising rewrites).
double reference(ActivationKind kind, double x) {
  switch (kind) {
    case ActivationKind::kSigmoid: return 1.0 / (1.0 + std::exp(-x));
    case ActivationKind::kTanh: return std::tanh(x);
    case ActivationKind::kRelu: return x > 0 ? x : 0.0;
    case ActivationKind::kSoftplus: return std::log(1.0 + std::exp(x));
    case ActivationKind::kLeakyRelu: return x > 0 ? x : kAlpha * x;
    case ActivationKind::kElu: return x > 0 ? x : kAlpha * (std::exp(x) - 1.0);
    case ActivationKind::kGelu: return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  }
  return 0.0;
}

tensor::Tensor forward_values(ActivationKind kind, const std::vector<float>& xs) {
  Activation act("act", kind, kAlpha);
  return act.forward(tensor::Tensor::from({1, static_cast<std::int64_t>(xs.size())}, xs), {})
      .clone();
}

// dL/dx for dL/dy = 1 at each x.
std::vector<float> derivative_values(ActivationKind kind, const std::vector<float>& xs) {
  Activation act("act", kind, kAlpha);
  const tensor::Tensor x = tensor::Tensor::from({static_cast<std::int64_t>(xs.size()), 1}, xs);
  act.forward(x, {});
  tensor::Tensor ones = tensor::Tensor::zeros(x.shape());
  ones.fill(1.0f);
  return act.backward(ones, true).to_vector();
}

TEST(ActivationTest, ParsesEveryNameAndRejectsOthers) {
  for (ActivationKind kind : kAllKinds) EXPECT_EQ(parse_activation(activation_name(kind)), kind);
  EXPECT_EQ(parse_activation("leaky_relu"), ActivationKind::kLeakyRelu);
  try {
    parse_activation("swish");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.activation"));
    EXPECT_THAT(e.what(), HasSubstr("'swish'"));
    EXPECT_THAT(e.what(), HasSubstr("sigmoid, tanh, relu, softplus, leaky_relu, elu, gelu"));
  }
}

TEST(ActivationTest, ForwardMatchesTheDefinitions) {
  const std::vector<float> xs{-3.0f, -1.5f, -0.4f, -0.01f, 0.01f, 0.3f, 1.0f, 2.5f, 6.0f};
  for (ActivationKind kind : kAllKinds) {
    SCOPED_TRACE(std::string(activation_name(kind)));
    const tensor::Tensor y = forward_values(kind, xs);
    for (std::size_t i = 0; i < xs.size(); ++i) {
      const double expected = reference(kind, xs[i]);
      EXPECT_NEAR(y.data()[i], expected, 1e-6 + 1e-6 * std::fabs(expected)) << "x = " << xs[i];
    }
  }
}

TEST(ActivationTest, ValuesByHand) {
  // relu(-2) = 0, relu(3) = 3; leaky(-2) = -0.4; sigmoid(0) = 1/2; tanh(0) = 0;
  // softplus(0) = log 2; gelu(0) = 0; elu(x) -> -alpha as x -> -inf.
  EXPECT_EQ(forward_values(ActivationKind::kRelu, {-2, 3}).to_vector(), (std::vector<float>{0, 3}));
  EXPECT_FLOAT_EQ(forward_values(ActivationKind::kLeakyRelu, {-2}).data()[0], -0.4f);
  EXPECT_EQ(forward_values(ActivationKind::kSigmoid, {0}).data()[0], 0.5f);
  EXPECT_EQ(forward_values(ActivationKind::kTanh, {0}).data()[0], 0.0f);
  EXPECT_FLOAT_EQ(forward_values(ActivationKind::kSoftplus, {0}).data()[0], std::log(2.0f));
  EXPECT_EQ(forward_values(ActivationKind::kGelu, {0}).data()[0], 0.0f);
  EXPECT_FLOAT_EQ(forward_values(ActivationKind::kElu, {-50}).data()[0], -kAlpha);
}

// The kink convention of activation.h: at exactly x = 0 the left branch holds.
TEST(ActivationTest, KinkTakesTheLeftDerivativeExactly) {
  EXPECT_EQ(derivative_values(ActivationKind::kRelu, {0.0f}), (std::vector<float>{0.0f}));
  EXPECT_EQ(derivative_values(ActivationKind::kLeakyRelu, {0.0f}), (std::vector<float>{kAlpha}));
  EXPECT_EQ(derivative_values(ActivationKind::kElu, {0.0f}), (std::vector<float>{kAlpha}));
  // -0.0 is the same point.
  EXPECT_EQ(derivative_values(ActivationKind::kRelu, {-0.0f}), (std::vector<float>{0.0f}));
  // The values at the kink are 0 for all three.
  for (ActivationKind kind :
       {ActivationKind::kRelu, ActivationKind::kLeakyRelu, ActivationKind::kElu}) {
    EXPECT_EQ(forward_values(kind, {0.0f}).data()[0], 0.0f);
  }
  // Either side of the kink: the right branch's slope is 1.
  EXPECT_EQ(derivative_values(ActivationKind::kRelu, {-1e-30f, 1e-30f}),
            (std::vector<float>{0.0f, 1.0f}));
  EXPECT_EQ(derivative_values(ActivationKind::kLeakyRelu, {-1e-30f, 1e-30f}),
            (std::vector<float>{kAlpha, 1.0f}));
}

TEST(ActivationTest, SoftplusAndSigmoidStayFiniteForLargeInputs) {
  // softplus(100) = 100 + log1p(e^-100) = 100 in f32; softplus(-100) = e^-100 ~ 3.7e-44 (a
  // denormal), never inf or nan; the derivative is sigmoid: 1 and ~0.
  const tensor::Tensor sp = forward_values(ActivationKind::kSoftplus, {100.0f, -100.0f});
  EXPECT_EQ(sp.data()[0], 100.0f);
  EXPECT_GE(sp.data()[1], 0.0f);
  EXPECT_LT(sp.data()[1], 1e-40f);
  const std::vector<float> dsp = derivative_values(ActivationKind::kSoftplus, {100.0f, -100.0f});
  EXPECT_EQ(dsp[0], 1.0f);
  EXPECT_GE(dsp[1], 0.0f);
  EXPECT_LT(dsp[1], 1e-40f);
  // Moderate inputs against the double reference.
  const tensor::Tensor mid = forward_values(ActivationKind::kSoftplus, {30.0f, -30.0f});
  EXPECT_FLOAT_EQ(mid.data()[0], 30.0f);
  EXPECT_NEAR(mid.data()[1], std::exp(-30.0), 1e-18);

  const tensor::Tensor sg = forward_values(ActivationKind::kSigmoid, {100.0f, -100.0f});
  EXPECT_EQ(sg.data()[0], 1.0f);
  EXPECT_GE(sg.data()[1], 0.0f);
  EXPECT_LT(sg.data()[1], 1e-40f);
  for (ActivationKind kind : kAllKinds) {
    for (float g : derivative_values(kind, {100.0f, -100.0f})) EXPECT_TRUE(std::isfinite(g));
  }
}

TEST(ActivationTest, FiniteDifferenceGradientsForEveryKind) {
  for (ActivationKind kind : kAllKinds) {
    SCOPED_TRACE(std::string(activation_name(kind)));
    Activation act("act", kind, kAlpha);
    ParamStore store;
    bind_single_layer(act, store);
    check_layer_gradients(act, store, random_tensor({3, 2, 4, 5}, 21, 2.5f, {0.0f}));
  }
}

TEST(ActivationTest, KeepsAnyShapeAndSkipsDxWhenAsked) {
  Activation act("act", ActivationKind::kTanh);
  EXPECT_EQ(act.output_shape({2, 3, 4, 5}), (tensor::Shape{2, 3, 4, 5}));
  const tensor::Tensor x = random_tensor({2, 3, 4, 5}, 1);
  EXPECT_EQ(act.forward(x, {}).shape(), x.shape());
  EXPECT_EQ(act.backward(x, /*need_input_grad=*/false).numel(), 0);
  EXPECT_EQ(act.describe(), "Activation(tanh)");
  EXPECT_EQ(Activation("a", ActivationKind::kLeakyRelu, 0.5f).describe(),
            "Activation(leaky_relu, alpha=0.5)");
}

// A tensor large enough to be split over the compute pool gives the same bits as one thread.
TEST(ActivationTest, ThreadSplitGivesTheSameBits) {
  const tensor::Tensor x = random_tensor({5, 20011}, 3, 4.0f);
  const tensor::Tensor dy = random_tensor({5, 20011}, 4);
  const int saved_threads = compute_threads();
  for (ActivationKind kind : kAllKinds) {
    SCOPED_TRACE(std::string(activation_name(kind)));
    std::vector<float> y[2], dx[2];
    for (int threads : {1, 2}) {
      set_compute_threads(threads);
      Activation act("act", kind, kAlpha);
      y[threads - 1] = act.forward(x, {}).to_vector();
      dx[threads - 1] = act.backward(dy, true).to_vector();
    }
    EXPECT_EQ(y[0], y[1]);
    EXPECT_EQ(dx[0], dx[1]);
  }
  set_compute_threads(saved_threads);
}

}  // namespace
}  // namespace dtrain::nn
