// state()/load_state(): a restored optimizer continues exactly as the original, and a checkpoint
// that does not fit is refused with a CheckpointError naming both sides.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/placed_floats.h"
#include "dtrain/base/rng.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {
namespace {

using ::testing::HasSubstr;

std::vector<OptimizerConfig> configs() {
  std::vector<OptimizerConfig> out;
  OptimizerConfig c;
  c.weight_decay = 0.01;
  out.push_back(c);  // sgd, no state
  c.momentum = 0.9;
  out.push_back(c);
  c.nesterov = true;
  out.push_back(c);
  c = OptimizerConfig{};
  c.name = "adam";
  c.weight_decay = 0.01;
  out.push_back(c);
  c.name = "adamw";
  out.push_back(c);
  c = OptimizerConfig{};
  c.name = "lars";
  c.weight_decay = 0.001;
  out.push_back(c);  // no state
  c.momentum = 0.9;
  out.push_back(c);
  return out;
}

const std::vector<Segment> kSegments = {{"w", 0, 21, true}, {"b", 21, 3, false}};

std::vector<float> random_vector(Rng& rng, std::size_t n) {
  std::vector<float> values(n);
  for (float& value : values) value = rng.normal();
  return values;
}

// "sgd momentum nesterov", "adam", ...: which of configs() a failure is about.
std::string describe(const OptimizerConfig& config) {
  return config.name + (config.momentum > 0 ? " momentum" : "") +
         (config.nesterov ? " nesterov" : "");
}

TEST(OptimizerState, RoundTripContinuesBitwiseIdentically) {
  for (const OptimizerConfig& config : configs()) {
    SCOPED_TRACE(describe(config));
    Rng rng(99, 1);
    std::unique_ptr<Optimizer> original = make_optimizer(config, kSegments);
    std::vector<float> params = random_vector(rng, 24);
    for (int step = 0; step < 3; ++step) {
      original->step(params.data(), random_vector(rng, 24).data(), 0.01);
    }

    std::unique_ptr<Optimizer> restored = make_optimizer(config, kSegments);
    restored->load_state(original->state(), original->steps());
    EXPECT_EQ(restored->steps(), 3);
    std::vector<float> restored_params = params;
    for (int step = 0; step < 3; ++step) {
      const std::vector<float> grads = random_vector(rng, 24);
      original->step(params.data(), grads.data(), 0.02);
      restored->step(restored_params.data(), grads.data(), 0.02);
    }
    EXPECT_EQ(params, restored_params);
    const std::vector<StateTensor> a = original->state();
    const std::vector<StateTensor> b = restored->state();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) {
      EXPECT_EQ(a[k].name, b[k].name);
      EXPECT_EQ(a[k].values, b[k].values);
      EXPECT_EQ(a[k].values.size(), 24u);
    }
  }
}

// The state follows the parameters to whatever page offsets they are passed at (optimizer.h,
// "Placement"); moving it must carry every value, so the trajectory is the same as with parameters
// that never move.
TEST(OptimizerState, ParametersAtNewPageOffsetsContinueBitwiseIdentically) {
  for (const OptimizerConfig& config : configs()) {
    SCOPED_TRACE(describe(config));
    Rng rng(7, 3);
    std::unique_ptr<Optimizer> still = make_optimizer(config, kSegments);
    std::unique_ptr<Optimizer> moving = make_optimizer(config, kSegments);
    std::vector<float> params = random_vector(rng, 24);
    // Each step the moving optimizer gets its parameters and gradients at other page offsets.
    const std::size_t offsets[][2] = {{0, 2048}, {1036, 12}, {4000, 4000}, {512, 2560}};
    for (const auto& [param_offset, grad_offset] : offsets) {
      const std::vector<float> grads = random_vector(rng, 24);
      PlacedFloats moved_params(24, param_offset);
      PlacedFloats moved_grads(24, grad_offset);
      std::copy(params.begin(), params.end(), moved_params.data());
      std::copy(grads.begin(), grads.end(), moved_grads.data());
      still->step(params.data(), grads.data(), 0.01);
      moving->step(moved_params.data(), moved_grads.data(), 0.01);
      EXPECT_EQ(params, std::vector<float>(moved_params.data(), moved_params.data() + 24));
    }
    const std::vector<StateTensor> a = still->state();
    const std::vector<StateTensor> b = moving->state();
    ASSERT_EQ(a.size(), b.size());
    for (std::size_t k = 0; k < a.size(); ++k) EXPECT_EQ(a[k].values, b[k].values);
  }
}

OptimizerConfig momentum_sgd() {
  OptimizerConfig config;
  config.momentum = 0.9;
  return config;
}

TEST(OptimizerState, WrongOptimizerNamesBothSides) {
  OptimizerConfig adam;
  adam.name = "adam";
  std::unique_ptr<Optimizer> sgd = make_optimizer(momentum_sgd(), kSegments);
  const std::vector<StateTensor> adam_state = make_optimizer(adam, kSegments)->state();
  try {
    sgd->load_state(adam_state, 5);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'sgd.momentum'"));
    EXPECT_THAT(error.what(), HasSubstr("'adam.exp_avg', 'adam.exp_avg_sq'"));
  }
  EXPECT_EQ(sgd->steps(), 0);
}

TEST(OptimizerState, StateForAnotherOptimizerWithoutStateIsRefused) {
  OptimizerConfig plain;  // sgd without momentum expects no state at all
  std::unique_ptr<Optimizer> sgd = make_optimizer(plain, kSegments);
  const std::vector<StateTensor> momentum_state =
      make_optimizer(momentum_sgd(), kSegments)->state();
  EXPECT_THROW(sgd->load_state(momentum_state, 1), CheckpointError);
  std::unique_ptr<Optimizer> with_momentum = make_optimizer(momentum_sgd(), kSegments);
  try {
    with_momentum->load_state({}, 1);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& error) {
    EXPECT_THAT(error.what(), HasSubstr("holds none"));
  }
}

TEST(OptimizerState, WrongSizeNamesBothSizes) {
  std::unique_ptr<Optimizer> sgd = make_optimizer(momentum_sgd(), kSegments);
  const std::vector<StateTensor> other =
      make_optimizer(momentum_sgd(), {{"w", 0, 10, true}})->state();
  try {
    sgd->load_state(other, 1);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& error) {
    EXPECT_THAT(error.what(), HasSubstr("has 10 floats"));
    EXPECT_THAT(error.what(), HasSubstr("expects 24"));
  }
}

TEST(OptimizerState, NonFiniteOrNegativeValuesAndStepsAreRefusedAndLeaveStateUnchanged) {
  std::unique_ptr<Optimizer> sgd = make_optimizer(momentum_sgd(), kSegments);
  std::vector<float> params(24, 1.0f);
  const std::vector<float> grads(24, 0.5f);
  sgd->step(params.data(), grads.data(), 0.1);
  const std::vector<StateTensor> good = sgd->state();

  std::vector<StateTensor> bad = good;
  bad[0].values[7] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(sgd->load_state(bad, 1), CheckpointError);
  EXPECT_THROW(sgd->load_state(good, -1), CheckpointError);
  EXPECT_EQ(sgd->state()[0].values, good[0].values);
  EXPECT_EQ(sgd->steps(), 1);

  OptimizerConfig adam_config;
  adam_config.name = "adam";
  std::unique_ptr<Optimizer> adam = make_optimizer(adam_config, kSegments);
  std::vector<StateTensor> adam_state = adam->state();
  adam_state[1].values[3] = -1.0f;  // a second moment cannot be negative
  try {
    adam->load_state(adam_state, 4);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& error) {
    EXPECT_THAT(error.what(), HasSubstr("adam.exp_avg_sq"));
    EXPECT_THAT(error.what(), HasSubstr("element 3"));
  }
  EXPECT_EQ(adam->steps(), 0);
}

}  // namespace
}  // namespace dtrain::optim
