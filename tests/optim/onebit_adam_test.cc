// 1-bit Adam's optimizer half (onebit_adam.h): its warm-up is Adam bit for bit, its frozen steps
// follow the rule worked out in double by a naive twin (to 1e-6 relative), the exchange sits
// between the momentum's update and the parameters', and a state reload at any step continues
// bitwise.
#include "dtrain/optim/onebit_adam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/optim/adam.h"
#include "random_values.h"

namespace dtrain::optim {
namespace {

constexpr std::int64_t kN = 37;  // odd: the vector loops' tails
constexpr std::int64_t kFreeze = 4;

OptimizerConfig onebit_config(double weight_decay) {
  OptimizerConfig config;
  config.name = "onebit_adam";
  config.weight_decay = weight_decay;
  config.freeze_step = kFreeze;
  return config;
}

// Two tensors, the second without weight decay (a bias).
std::vector<Segment> segments() { return {{"w", 0, 30, true}, {"b", 30, kN - 30, false}}; }

std::vector<float> gradient(int step) { return testing::random_values(kN, 500 + step); }

TEST(OneBitAdam, WarmUpIsAdamBitForBit) {
  OneBitAdam onebit(onebit_config(0.01), segments());
  OptimizerConfig adam_config = onebit_config(0.01);
  adam_config.name = "adam";
  Adam adam(adam_config, segments(), /*decoupled=*/false);
  std::vector<float> p1 = testing::random_values(kN, 7), p2 = p1;
  for (int step = 0; step < kFreeze; ++step) {
    EXPECT_FALSE(onebit.frozen());
    const std::vector<float> g = gradient(step);
    onebit.step(p1.data(), g.data(), 0.01);
    adam.step(p2.data(), g.data(), 0.01);
    ASSERT_EQ(p1, p2) << "step " << step;
  }
  EXPECT_TRUE(onebit.frozen());
  EXPECT_EQ(onebit.state()[0].values, adam.state()[0].values);
  EXPECT_EQ(onebit.state()[1].values, adam.state()[1].values);
}

TEST(OneBitAdam, FrozenStepsFollowTheRuleWithTheExchangeBetweenMomentumAndParameters) {
  const double lr = 0.01, wd = 0.01, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  const float scale = 2.0f;
  OneBitAdam onebit(onebit_config(wd), segments());
  std::vector<float> p = testing::random_values(kN, 7);
  for (int step = 0; step < kFreeze; ++step) onebit.step(p.data(), gradient(step).data(), lr);
  // The twin, in double, from the state at the freeze.
  const std::vector<float> m0 = onebit.state()[0].values;
  std::vector<double> m(m0.begin(), m0.end());
  const std::vector<float> v = onebit.state()[1].values;
  std::vector<double> q(p.begin(), p.end());
  const double bc2 = 1.0 - std::pow(beta2, kFreeze);
  for (int step = kFreeze; step < kFreeze + 3; ++step) {
    const std::vector<float> g = gradient(step);
    // The exchange: every momentum halved, as an average with a rank holding zeros would be.
    int calls = 0;
    onebit.step(p.data(), g.data(), lr, scale, [&](std::span<float> momentum) {
      ++calls;
      ASSERT_EQ(std::ssize(momentum), kN);
      for (float& x : momentum) x *= 0.5f;
    });
    EXPECT_EQ(calls, 1);
    const double t = step + 1;
    for (std::int64_t i = 0; i < kN; ++i) {
      const double decay = i < 30 ? wd : 0.0;
      m[i] = 0.5 * (beta1 * m[i] + (1 - beta1) * (scale * g[i] + decay * q[i]));
      q[i] -= lr / (1 - std::pow(beta1, t)) * m[i] / (std::sqrt(v[i] / bc2) + eps);
    }
    for (std::int64_t i = 0; i < kN; ++i) {
      EXPECT_NEAR(p[i], q[i], 1e-6 * std::max(1.0, std::fabs(q[i]))) << "step " << step << " " << i;
      // float momentum against the double twin: 1e-5 relative (1.0e-6 measured at -O1).
      EXPECT_NEAR(onebit.state()[0].values[i], m[i], 1e-5 * std::max(1e-3, std::fabs(m[i])));
    }
    EXPECT_EQ(onebit.state()[1].values, v) << "the variance is frozen";
  }
}

TEST(OneBitAdam, ReloadedStateContinuesBitwiseInEitherPhase) {
  const int steps = 8;
  OneBitAdam whole(onebit_config(0.0), segments());
  std::vector<float> p = testing::random_values(kN, 7);
  std::vector<std::vector<float>> trajectory;
  std::vector<std::vector<StateTensor>> states;
  for (int step = 0; step < steps; ++step) {
    states.push_back(whole.state());
    whole.step(p.data(), gradient(step).data(), 0.01);
    trajectory.push_back(p);
  }
  for (int at : {2, static_cast<int>(kFreeze), 6}) {
    OneBitAdam resumed(onebit_config(0.0), segments());
    resumed.load_state(states[at], at);
    std::vector<float> q = at == 0 ? testing::random_values(kN, 7) : trajectory[at - 1];
    for (int step = at; step < steps; ++step) resumed.step(q.data(), gradient(step).data(), 0.01);
    EXPECT_EQ(q, trajectory.back()) << "resumed at step " << at;
  }
}

TEST(OneBitAdam, ElementsNoGradientReachedInTheWarmUpStayPut) {
  // Element 3 never has a gradient, so v = 0 there; an exchange that hands it +-scale (as the sign
  // codec does) must not move it by lr x scale / eps.
  OneBitAdam onebit(onebit_config(0.0), segments());
  std::vector<float> p = testing::random_values(kN, 7);
  for (int step = 0; step < kFreeze + 3; ++step) {
    std::vector<float> g = gradient(step);
    g[3] = 0.0f;
    const float before = p[3];
    onebit.step(p.data(), g.data(), 0.01, 1.0f, [](std::span<float> momentum) {
      for (float& x : momentum) x = x < 0.0f ? -0.5f : 0.5f;
    });
    EXPECT_EQ(p[3], before) << "step " << step;
    if (step >= kFreeze) {
      EXPECT_EQ(onebit.state()[0].values[3], 0.0f);
    }
  }
  EXPECT_NE(p[4], testing::random_values(kN, 7)[4]);
}

TEST(OneBitAdam, FreezeStepBelowOneIsAConfigError) {
  OptimizerConfig config = onebit_config(0.0);
  config.freeze_step = 0;
  EXPECT_THROW(make_optimizer(config, segments()), ConfigError);
  config.freeze_step = 1;
  config.momentum = 0.9;
  EXPECT_THROW(make_optimizer(config, segments()), ConfigError);
}

}  // namespace
}  // namespace dtrain::optim
