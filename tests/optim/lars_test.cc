// LARS against updates worked out by hand (lars.h gives the formulas).
#include "dtrain/optim/lars.h"

#include <gtest/gtest.h>

#include <vector>

namespace dtrain::optim {
namespace {

constexpr double kTol = 1e-6;

OptimizerConfig lars_config(double momentum) {
  OptimizerConfig config;
  config.name = "lars";
  config.momentum = momentum;
  config.weight_decay = 0.1;
  config.trust_coefficient = 0.1;
  config.lars_eps = 0.0;
  return config;
}

TEST(Lars, TrustRatioPerSegmentWithMomentum) {
  // "w" = [3, 4] adapts and decays; "b" = [1] is a bias: local_lr 1, no decay.
  Lars lars(lars_config(0.9), {{"w", 0, 2, true}, {"b", 2, 1, false}});
  std::vector<float> p = {3.0f, 4.0f, 1.0f};
  const std::vector<float> g = {0.6f, 0.8f, 0.5f};

  lars.step(p.data(), g.data(), 1.0);
  // w: ||p|| = 5, ||g|| = 1, local_lr = 0.1 * 5 / (1 + 0.1 * 5) = 1/3
  //    g + wd p = [0.9, 1.2], v = [0.3, 0.4], p = [2.7, 3.6]
  // b: v = 0.5, p = 0.5
  EXPECT_NEAR(lars.last_local_lrs()[0], 1.0 / 3.0, 1e-7);  // 0.6f, 0.8f are not exact
  EXPECT_EQ(lars.last_local_lrs()[1], 1.0);
  EXPECT_NEAR(p[0], 2.7, kTol);
  EXPECT_NEAR(p[1], 3.6, kTol);
  EXPECT_NEAR(p[2], 0.5, kTol);

  lars.step(p.data(), g.data(), 1.0);
  // w: ||p|| = sqrt(2.7^2 + 3.6^2) = 4.5, local_lr = 0.45 / (1 + 0.45) = 0.31034483
  //    g + wd p = [0.87, 1.16], local_lr * that = [0.27, 0.36]
  //    v = 0.9 * [0.3, 0.4] + [0.27, 0.36] = [0.54, 0.72], p = [2.16, 2.88]
  // b: v = 0.9 * 0.5 + 0.5 = 0.95, p = 0.5 - 0.95 = -0.45
  EXPECT_NEAR(lars.last_local_lrs()[0], 0.45 / 1.45, 1e-7);
  EXPECT_NEAR(p[0], 2.16, kTol);
  EXPECT_NEAR(p[1], 2.88, kTol);
  EXPECT_NEAR(p[2], -0.45, kTol);
  const std::vector<StateTensor> state = lars.state();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].name, "lars.momentum");
  EXPECT_NEAR(state[0].values[0], 0.54, kTol);
  EXPECT_NEAR(state[0].values[1], 0.72, kTol);
  EXPECT_NEAR(state[0].values[2], 0.95, kTol);
}

TEST(Lars, UpdateSizeIsIndependentOfTheGradientScale) {
  // Without weight decay the step of an adapted segment is lr * eta * ||p|| * g / ||g||: scaling
  // g by 1000 changes nothing. p = [3, 4], g = [6, 8] * s: step = 0.1 * 5 * [0.6, 0.8] = [0.3,
  // 0.4].
  for (float scale : {1e-3f, 1.0f, 1e3f}) {
    OptimizerConfig config = lars_config(0.0);
    config.weight_decay = 0.0;
    Lars lars(config, {{"w", 0, 2, true}});
    std::vector<float> p = {3.0f, 4.0f};
    const std::vector<float> g = {6.0f * scale, 8.0f * scale};
    lars.step(p.data(), g.data(), 1.0);
    EXPECT_NEAR(p[0], 2.7, 1e-5) << "scale " << scale;
    EXPECT_NEAR(p[1], 3.6, 1e-5) << "scale " << scale;
    EXPECT_TRUE(lars.state().empty());
  }
}

TEST(Lars, ZeroNormsFallBackToLocalRateOne) {
  Lars lars(lars_config(0.0), {{"zero_p", 0, 2, true}, {"zero_g", 2, 2, true}});
  std::vector<float> p = {0.0f, 0.0f, 2.0f, -4.0f};
  const std::vector<float> g = {1.0f, -1.0f, 0.0f, 0.0f};
  lars.step(p.data(), g.data(), 0.5);
  // zero_p: ||p|| = 0 -> local_lr 1, p = 0 - 0.5 * (g + 0.1 * 0) = [-0.5, 0.5]
  // zero_g: ||g|| = 0 -> local_lr 1, p -= 0.5 * 0.1 * p: [2 - 0.1, -4 + 0.2] = [1.9, -3.8]
  EXPECT_EQ(lars.last_local_lrs()[0], 1.0);
  EXPECT_EQ(lars.last_local_lrs()[1], 1.0);
  EXPECT_NEAR(p[0], -0.5, kTol);
  EXPECT_NEAR(p[1], 0.5, kTol);
  EXPECT_NEAR(p[2], 1.9, kTol);
  EXPECT_NEAR(p[3], -3.8, kTol);
}

TEST(Lars, EpsilonEntersTheDenominator) {
  OptimizerConfig config = lars_config(0.0);
  config.weight_decay = 0.0;
  config.lars_eps = 1.0;
  Lars lars(config, {{"w", 0, 2, true}});
  std::vector<float> p = {3.0f, 4.0f};
  const std::vector<float> g = {0.6f, 0.8f};
  lars.step(p.data(), g.data(), 1.0);
  // local_lr = 0.1 * 5 / (1 + 0 + 1) = 0.25, p = [3 - 0.15, 4 - 0.2]
  EXPECT_NEAR(lars.last_local_lrs()[0], 0.25, 1e-7);
  EXPECT_NEAR(p[0], 2.85, kTol);
  EXPECT_NEAR(p[1], 3.8, kTol);
}

}  // namespace
}  // namespace dtrain::optim
