// SGD against updates worked out by hand (sgd.h gives the formulas).
#include "dtrain/optim/sgd.h"

#include <gtest/gtest.h>

#include <vector>

namespace dtrain::optim {
namespace {

constexpr double kTol = 1e-6;

TEST(Sgd, PlainStepsWithWeightDecayOnOneSegmentOnly) {
  OptimizerConfig config;
  config.weight_decay = 0.1;
  // A = params[0..2) decays, B = params[2] (a bias) does not.
  Sgd sgd(config, {{"a", 0, 2, true}, {"b", 2, 1, false}});
  std::vector<float> p = {1.0f, -2.0f, 0.5f};
  const std::vector<float> g = {0.5f, 0.5f, -1.0f};

  sgd.step(p.data(), g.data(), 0.1);
  // a0: g' = 0.5 + 0.1 * 1 = 0.6,    p = 1 - 0.1 * 0.6 = 0.94
  // a1: g' = 0.5 + 0.1 * -2 = 0.3,   p = -2 - 0.1 * 0.3 = -2.03
  // b:  g' = -1 (no decay),          p = 0.5 + 0.1 = 0.6
  EXPECT_NEAR(p[0], 0.94, kTol);
  EXPECT_NEAR(p[1], -2.03, kTol);
  EXPECT_NEAR(p[2], 0.6, kTol);

  sgd.step(p.data(), g.data(), 0.1);
  // a0: g' = 0.5 + 0.094 = 0.594,    p = 0.94 - 0.0594 = 0.8806
  // a1: g' = 0.5 - 0.203 = 0.297,    p = -2.03 - 0.0297 = -2.0597
  // b:  p = 0.6 + 0.1 = 0.7
  EXPECT_NEAR(p[0], 0.8806, kTol);
  EXPECT_NEAR(p[1], -2.0597, kTol);
  EXPECT_NEAR(p[2], 0.7, kTol);
  EXPECT_EQ(sgd.steps(), 2);
  EXPECT_TRUE(sgd.state().empty());  // no momentum, no state
}

TEST(Sgd, MomentumStartsFromTheFirstGradient) {
  OptimizerConfig config;
  config.momentum = 0.9;
  Sgd sgd(config, {{"w", 0, 1, true}});
  std::vector<float> p = {1.0f};
  const float grads[] = {1.0f, 2.0f, -1.0f};
  // step 1: v = 0.9 * 0 + 1 = 1 (PyTorch's v_1 = g_1),  p = 1 - 0.1 * 1 = 0.9
  // step 2: v = 0.9 * 1 + 2 = 2.9,                      p = 0.9 - 0.29 = 0.61
  // step 3: v = 0.9 * 2.9 - 1 = 1.61,                   p = 0.61 - 0.161 = 0.449
  const double expected_p[] = {0.9, 0.61, 0.449};
  const double expected_v[] = {1.0, 2.9, 1.61};
  for (int t = 0; t < 3; ++t) {
    sgd.step(p.data(), &grads[t], 0.1);
    EXPECT_NEAR(p[0], expected_p[t], kTol) << "step " << t + 1;
    ASSERT_EQ(sgd.state().size(), 1u);
    EXPECT_EQ(sgd.state()[0].name, "sgd.momentum");
    EXPECT_NEAR(sgd.state()[0].values[0], expected_v[t], kTol) << "step " << t + 1;
  }
}

TEST(Sgd, NesterovLooksAheadAlongTheMomentum) {
  OptimizerConfig config;
  config.momentum = 0.9;
  config.nesterov = true;
  Sgd sgd(config, {{"w", 0, 1, true}});
  std::vector<float> p = {1.0f};
  const float grads[] = {1.0f, 2.0f, -1.0f};
  // step 1: v = 1,    update = 1 + 0.9 * 1 = 1.9,      p = 1 - 0.19 = 0.81
  // step 2: v = 2.9,  update = 2 + 0.9 * 2.9 = 4.61,   p = 0.81 - 0.461 = 0.349
  // step 3: v = 1.61, update = -1 + 0.9 * 1.61 = 0.449, p = 0.349 - 0.0449 = 0.3041
  const double expected[] = {0.81, 0.349, 0.3041};
  for (int t = 0; t < 3; ++t) {
    sgd.step(p.data(), &grads[t], 0.1);
    EXPECT_NEAR(p[0], expected[t], kTol) << "step " << t + 1;
  }
}

TEST(Sgd, MomentumWithWeightDecayPerSegment) {
  OptimizerConfig config;
  config.momentum = 0.9;
  config.weight_decay = 0.1;
  Sgd sgd(config, {{"w", 0, 1, true}, {"b", 1, 1, false}});
  std::vector<float> p = {1.0f, 1.0f};
  const std::vector<float> g = {1.0f, 1.0f};
  sgd.step(p.data(), g.data(), 0.1);
  // w: g' = 1 + 0.1 * 1 = 1.1, v = 1.1, p = 1 - 0.11 = 0.89;   b: v = 1, p = 0.9
  EXPECT_NEAR(p[0], 0.89, kTol);
  EXPECT_NEAR(p[1], 0.9, kTol);
  sgd.step(p.data(), g.data(), 0.1);
  // w: g' = 1 + 0.089 = 1.089, v = 0.99 + 1.089 = 2.079, p = 0.89 - 0.2079 = 0.6821
  // b: v = 0.9 + 1 = 1.9, p = 0.9 - 0.19 = 0.71
  EXPECT_NEAR(p[0], 0.6821, kTol);
  EXPECT_NEAR(p[1], 0.71, kTol);
}

TEST(Sgd, StateIsPackedInSegmentOrderAndGapsAreUntouched) {
  OptimizerConfig config;
  config.momentum = 0.5;
  // Segments given out of address order, with a gap at [2, 4) that belongs to nobody.
  Sgd sgd(config, {{"late", 4, 2, true}, {"early", 0, 2, true}});
  EXPECT_EQ(sgd.state_numel(), 4);
  std::vector<float> p = {0.0f, 0.0f, 7.0f, 8.0f, 0.0f, 0.0f};
  const std::vector<float> g = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
  sgd.step(p.data(), g.data(), 1.0);
  // v_1 = g, packed as late (g[4], g[5]) then early (g[0], g[1]).
  EXPECT_EQ(sgd.state()[0].values, (std::vector<float>{5.0f, 6.0f, 1.0f, 2.0f}));
  EXPECT_EQ(p, (std::vector<float>{-1.0f, -2.0f, 7.0f, 8.0f, -5.0f, -6.0f}));
}

TEST(Sgd, ZeroLearningRateLeavesParametersButAdvancesMomentum) {
  OptimizerConfig config;
  config.momentum = 0.9;
  Sgd sgd(config, {{"w", 0, 2, true}});
  std::vector<float> p = {1.0f, 2.0f};
  const std::vector<float> g = {3.0f, 4.0f};
  sgd.step(p.data(), g.data(), 0.0);
  EXPECT_EQ(p, (std::vector<float>{1.0f, 2.0f}));
  EXPECT_EQ(sgd.state()[0].values, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(sgd.steps(), 1);
}

}  // namespace
}  // namespace dtrain::optim
