#include "dtrain/nn/dropout.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;
using testing::random_tensor;

ForwardContext train_ctx(std::uint64_t seed = 5, std::int64_t step = 0) {
  return ForwardContext{Mode::kTrain, seed, step};
}

std::vector<float> mask_of(const std::string& name, float p, const tensor::Tensor& x,
                           const ForwardContext& ctx) {
  Dropout drop(name, p);
  drop.forward(x, ctx);
  return drop.mask().to_vector();
}

TEST(DropoutTest, ProbabilityOutsideZeroToOneIsAConfigError) {
  for (float p : {1.0f, -0.1f, 1.5f, std::nanf("")}) {
    try {
      Dropout drop("drop3", p);
      FAIL() << "expected ConfigError for p = " << p;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layer drop3"));
      EXPECT_THAT(e.what(), HasSubstr("[0, 1)"));
    }
  }
  EXPECT_NO_THROW(Dropout("d", 0.0f));
  EXPECT_NO_THROW(Dropout("d", 0.99f));
}

TEST(DropoutTest, EvalModeAndZeroProbabilityAreTheIdentity) {
  const tensor::Tensor x = random_tensor({4, 6}, 1);
  const tensor::Tensor dy = random_tensor({4, 6}, 2);
  Dropout drop("drop", 0.5f);
  EXPECT_EQ(drop.forward(x, ForwardContext{Mode::kEval, 5, 0}).to_vector(), x.to_vector());
  EXPECT_EQ(drop.backward(dy, true).to_vector(), dy.to_vector());
  Dropout none("drop", 0.0f);
  EXPECT_EQ(none.forward(x, train_ctx()).to_vector(), x.to_vector());
  EXPECT_EQ(none.backward(dy, true).to_vector(), dy.to_vector());
}

// n = 200000 elements of x = 1, p = 0.3: the dropped fraction has standard deviation
// sqrt(p (1 - p) / n) = 0.001; the mean of y (each 0 or 1/0.7) has 0.001 / 0.7 = 0.0015.
// Bounds of five standard deviations.
TEST(DropoutTest, TrainingKeepsTheMeanAndDropsTheRightFraction) {
  const float p = 0.3f;
  const std::int64_t n = 200000;
  tensor::Tensor x = tensor::Tensor::zeros({n / 100, 100});
  x.fill(1.0f);
  Dropout drop("drop", p);
  const tensor::Tensor y = drop.forward(x, train_ctx()).clone();
  const float scale = 1.0f / (1.0f - p);
  std::int64_t dropped = 0;
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = y.data()[i];
    ASSERT_TRUE(v == 0.0f || v == scale) << "element " << i << " = " << v;
    dropped += v == 0.0f ? 1 : 0;
    sum += v;
  }
  const double sd = std::sqrt(p * (1.0 - p) / static_cast<double>(n));
  EXPECT_NEAR(static_cast<double>(dropped) / static_cast<double>(n), p, 5.0 * sd);
  EXPECT_NEAR(sum / static_cast<double>(n), 1.0, 5.0 * sd * scale);
}

TEST(DropoutTest, MaskIsAFunctionOfSeedStepAndName) {
  const tensor::Tensor x = random_tensor({8, 50}, 1);
  const std::vector<float> base = mask_of("drop1", 0.5f, x, train_ctx(5, 3));
  EXPECT_EQ(mask_of("drop1", 0.5f, x, train_ctx(5, 3)), base);  // a fresh layer, same mask
  EXPECT_NE(mask_of("drop1", 0.5f, x, train_ctx(5, 4)), base);  // next step
  EXPECT_NE(mask_of("drop1", 0.5f, x, train_ctx(6, 3)), base);  // another seed
  EXPECT_NE(mask_of("drop2", 0.5f, x, train_ctx(5, 3)), base);  // another layer
  // The same layer repeating a step (a recomputed forward) repeats its mask.
  Dropout drop("drop1", 0.5f);
  drop.forward(x, train_ctx(5, 3));
  drop.forward(x, train_ctx(5, 9));
  drop.forward(x, train_ctx(5, 3));
  EXPECT_EQ(drop.mask().to_vector(), base);
}

TEST(DropoutTest, MaskDoesNotDependOnTheThreadCount) {
  const tensor::Tensor x = random_tensor({4, 20000}, 1);
  const int saved_threads = compute_threads();
  set_compute_threads(1);
  const std::vector<float> one = mask_of("drop", 0.4f, x, train_ctx());
  set_compute_threads(2);
  const std::vector<float> two = mask_of("drop", 0.4f, x, train_ctx());
  set_compute_threads(saved_threads);
  EXPECT_EQ(one, two);
}

TEST(DropoutTest, BackwardAppliesTheForwardMask) {
  const float p = 0.25f;
  const tensor::Tensor x = random_tensor({6, 7}, 1);
  const tensor::Tensor dy = random_tensor({6, 7}, 2);
  Dropout drop("drop", p);
  const tensor::Tensor y = drop.forward(x, train_ctx()).clone();
  const tensor::Tensor dx = drop.backward(dy, true).clone();
  std::int64_t kept = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float m = drop.mask().data()[i];
    EXPECT_EQ(y.data()[i], x.data()[i] * m);
    EXPECT_EQ(dx.data()[i], dy.data()[i] * m);
    if (m != 0.0f) {
      EXPECT_EQ(m, 1.0f / (1.0f - p));
      ++kept;
    } else {
      EXPECT_EQ(dx.data()[i], 0.0f);
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, x.numel());
  EXPECT_EQ(drop.backward(dy, false).numel(), 0);
}

TEST(DropoutTest, FiniteDifferenceGradientsWithAFixedMask) {
  Dropout drop("drop", 0.4f);
  ParamStore store;
  testing::bind_single_layer(drop, store);
  testing::check_layer_gradients(drop, store, random_tensor({5, 9}, 3));
}

}  // namespace
}  // namespace dtrain::nn
