// Adam and AdamW against updates worked out by hand (adam.h gives the formulas).
#include "dtrain/optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dtrain::optim {
namespace {

constexpr double kTol = 2e-6;

OptimizerConfig adam_config(double weight_decay) {
  OptimizerConfig config;
  config.name = "adam";
  config.weight_decay = weight_decay;  // beta1 0.9, beta2 0.999, eps 1e-8 (defaults)
  return config;
}

TEST(Adam, TwoBiasCorrectedSteps) {
  Adam adam(adam_config(0.0), {{"w", 0, 1, true}}, /*decoupled=*/false);
  std::vector<float> p = {1.0f};
  float g = 2.0f;
  adam.step(p.data(), &g, 0.1);
  // t = 1: m = 0.1 * 2 = 0.2, v = 0.001 * 4 = 0.004; bc1 = 0.1, bc2 = 0.001
  //        m_hat = 2, sqrt(v_hat) = 2 -> p = 1 - 0.1 * 2 / (2 + 1e-8) = 0.9
  EXPECT_NEAR(p[0], 0.9, kTol);
  std::vector<StateTensor> state = adam.state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "adam.exp_avg");
  EXPECT_EQ(state[1].name, "adam.exp_avg_sq");
  EXPECT_NEAR(state[0].values[0], 0.2, 1e-7);
  EXPECT_NEAR(state[1].values[0], 0.004, 1e-9);

  g = -1.0f;
  adam.step(p.data(), &g, 0.1);
  // t = 2: m = 0.9 * 0.2 - 0.1 = 0.08, v = 0.999 * 0.004 + 0.001 * 1 = 0.004996
  //        bc1 = 1 - 0.81 = 0.19, bc2 = 1 - 0.998001 = 0.001999
  //        m_hat = 0.42105263, sqrt(v_hat) = sqrt(2.49924962) = 1.58090152
  //        p = 0.9 - 0.1 * 0.42105263 / 1.58090152 = 0.9 - 0.02663370 = 0.87336630
  EXPECT_NEAR(p[0], 0.8733663, kTol);
  state = adam.state();
  EXPECT_NEAR(state[0].values[0], 0.08, 1e-7);
  EXPECT_NEAR(state[1].values[0], 0.004996, 1e-9);
}

TEST(Adam, FirstStepMovesByTheLearningRateWhateverTheGradientScale) {
  // Bias correction: at t = 1, m_hat = g and sqrt(v_hat) = |g|, so the step is lr * g / (|g| +
  // eps).
  Adam adam(adam_config(0.0), {{"w", 0, 3, true}}, false);
  std::vector<float> p = {0.0f, 0.0f, 0.0f};
  const std::vector<float> g = {1e-3f, -1e3f, 0.0f};
  adam.step(p.data(), g.data(), 0.01);
  EXPECT_NEAR(p[0], -0.01 * 1e-3 / (1e-3 + 1e-8), 1e-8);  // -0.0099999
  EXPECT_NEAR(p[1], 0.01, 1e-8);
  EXPECT_EQ(p[2], 0.0f);  // zero gradient: m = v = 0, no move
}

TEST(Adam, L2WeightDecayIsAddedToTheGradientOnlyWhereEnabled) {
  Adam adam(adam_config(0.5), {{"w", 0, 1, true}, {"b", 1, 1, false}}, false);
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {2.0f, 2.0f};
  adam.step(p.data(), g.data(), 0.1);
  // w: g' = 2 + 0.5 * 1 = 2.5; step 1 moves by lr: p = 0.9.  b: same first step, p = 0.9
  EXPECT_NEAR(p[0], 0.9, kTol);
  EXPECT_NEAR(p[1], 0.9, kTol);
  g = {-1.0f, -1.0f};
  adam.step(p.data(), g.data(), 0.1);
  // w: g' = -1 + 0.5 * 0.9 = -0.55; m = 0.9 * 0.25 - 0.1 * 0.55 = 0.17
  //    v = 0.999 * 0.00625 + 0.001 * 0.3025 = 0.00654625
  //    m_hat = 0.17 / 0.19 = 0.89473684, sqrt(v_hat) = sqrt(0.00654625 / 0.001999) = 1.80963045
  //    p = 0.9 - 0.1 * 0.89473684 / 1.80963045 = 0.9 - 0.04944307 = 0.85055693
  // b: no decay, the plain two-step value 0.87336630 (TwoBiasCorrectedSteps)
  EXPECT_NEAR(p[0], 0.8505569, kTol);
  EXPECT_NEAR(p[1], 0.8733663, kTol);
}

TEST(AdamW, DecayIsDecoupledFromTheMoments) {
  OptimizerConfig config = adam_config(0.5);
  config.name = "adamw";
  Adam adamw(config, {{"w", 0, 1, true}, {"b", 1, 1, false}}, /*decoupled=*/true);
  std::vector<float> p = {1.0f, 1.0f};
  std::vector<float> g = {2.0f, 2.0f};
  adamw.step(p.data(), g.data(), 0.1);
  // w: p = 1 * (1 - 0.1 * 0.5) = 0.95, then the Adam step of g = 2 (moments see no decay):
  //    p = 0.95 - 0.1 = 0.85.   b: plain Adam, p = 0.9
  EXPECT_NEAR(p[0], 0.85, kTol);
  EXPECT_NEAR(p[1], 0.9, kTol);
  g = {-1.0f, -1.0f};
  adamw.step(p.data(), g.data(), 0.1);
  // w: p = 0.85 * 0.95 = 0.8075, then the same step as plain Adam's second: 0.8075 - 0.02663370
  //    = 0.78086630.   b: 0.87336630
  EXPECT_NEAR(p[0], 0.7808663, kTol);
  EXPECT_NEAR(p[1], 0.8733663, kTol);
  const std::vector<StateTensor> state = adamw.state();
  EXPECT_EQ(state[0].name, "adamw.exp_avg");
  // The moments are those of the undecayed gradients: m = 0.08, v = 0.004996 for both elements.
  EXPECT_NEAR(state[0].values[0], 0.08, 1e-7);
  EXPECT_NEAR(state[1].values[0], 0.004996, 1e-9);
  EXPECT_EQ(state[0].values[0], state[0].values[1]);
}

TEST(Adam, BiasCorrectionFollowsTheLoadedStepCount) {
  // With m = 0.2, v = 0.004 loaded at step 1000, bias correction is ~1 for m (1 - 0.9^1001) and
  // 1 - 0.999^1001 = 0.632672 for v. One more step with g = 0.2: m = 0.9 * 0.2 + 0.1 * 0.2 = 0.2,
  // v = 0.999 * 0.004 + 0.001 * 0.04 = 0.004036,
  //   sqrt(v_hat) = sqrt(0.004036 / 0.632672) = 0.0798705, update = 0.1 * 0.2 / 0.0798705 =
  //   0.250405
  // (a fresh optimizer at t = 1 would instead move by lr = 0.1).
  Adam adam(adam_config(0.0), {{"w", 0, 1, true}}, false);
  adam.load_state({{"adam.exp_avg", {0.2f}}, {"adam.exp_avg_sq", {0.004f}}}, 1000);
  std::vector<float> p = {1.0f};
  const float g = 0.2f;
  adam.step(p.data(), &g, 0.1);
  const double bc2 = 1.0 - std::pow(0.999, 1001.0);
  EXPECT_NEAR(bc2, 0.632672, 1e-6);
  EXPECT_NEAR(p[0], 1.0 - 0.250405, 1e-5);
  EXPECT_EQ(adam.steps(), 1001);
}

}  // namespace
}  // namespace dtrain::optim
