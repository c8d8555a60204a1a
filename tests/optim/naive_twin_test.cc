// Every optimizer against its naive twin (naive_optimizers.h) on random data: several segments of
// odd sizes (the AVX body and the scalar tail), out of address order, a gap no segment covers, an
// empty segment, weight decay on and off, and a learning rate that changes every step.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/optim/optimizer.h"
#include "naive_optimizers.h"

namespace dtrain::optim {
namespace {

struct TwinCase {
  std::string label;
  OptimizerConfig config;
};

std::vector<TwinCase> twin_cases() {
  std::vector<TwinCase> cases;
  const auto add = [&cases](std::string label, auto edit) {
    OptimizerConfig config;
    edit(config);
    cases.push_back({std::move(label), config});
  };
  add("sgd", [](OptimizerConfig& c) { c.weight_decay = 0.01; });
  add("sgd_momentum", [](OptimizerConfig& c) {
    c.momentum = 0.9;
    c.weight_decay = 0.01;
  });
  add("sgd_nesterov", [](OptimizerConfig& c) {
    c.momentum = 0.8;
    c.nesterov = true;
    c.weight_decay = 0.05;
  });
  add("adam", [](OptimizerConfig& c) {
    c.name = "adam";
    c.weight_decay = 0.01;
  });
  add("adamw", [](OptimizerConfig& c) {
    c.name = "adamw";
    c.weight_decay = 0.1;
    c.beta1 = 0.8;
    c.beta2 = 0.99;
  });
  add("lars", [](OptimizerConfig& c) {
    c.name = "lars";
    c.weight_decay = 0.0005;
  });
  add("lars_momentum", [](OptimizerConfig& c) {
    c.name = "lars";
    c.momentum = 0.9;
    c.weight_decay = 0.0005;
    c.trust_coefficient = 0.02;
  });
  return cases;
}

// Names the case in failure messages instead of dumping its bytes.
void PrintTo(const TwinCase& c, std::ostream* os) { *os << c.label; }

class NaiveTwin : public ::testing::TestWithParam<TwinCase> {};

TEST_P(NaiveTwin, MatchesOverSeveralSteps) {
  const OptimizerConfig& config = GetParam().config;
  // Flat buffer of 200: [0, 37) fc.weight, [37, 40) fc.bias, [40, 50) nobody's, [50, 150)
  // conv.weight, [150, 151) scale, [151, 200) nobody's; listed out of order, with an empty one.
  const std::vector<Segment> segments = {{"conv.weight", 50, 100, true},
                                         {"fc.weight", 0, 37, true},
                                         {"empty", 151, 0, true},
                                         {"fc.bias", 37, 3, false},
                                         {"scale", 150, 1, false}};
  constexpr std::size_t kSize = 200;
  std::unique_ptr<Optimizer> optimizer = make_optimizer(config, segments);
  testing::NaiveOptimizer naive(config, segments);

  Rng rng(1234, 7);
  std::vector<float> params(kSize);
  for (float& value : params) value = rng.normal();
  std::vector<double> naive_params(params.begin(), params.end());
  const std::vector<float> initial = params;

  for (int step = 0; step < 6; ++step) {
    std::vector<float> grads(kSize);
    for (float& value : grads) value = 0.5f * rng.normal();
    const std::vector<double> naive_grads(grads.begin(), grads.end());
    const double lr = 0.05 * (1.0 + 0.3 * step);
    optimizer->step(params.data(), grads.data(), lr);
    naive.step(naive_params, naive_grads, lr);
    for (std::size_t i = 0; i < kSize; ++i) {
      const double tolerance = 2e-5 * (1.0 + std::abs(naive_params[i]));
      ASSERT_NEAR(params[i], naive_params[i], tolerance)
          << GetParam().label << ", step " << step + 1 << ", element " << i;
    }
  }
  // Elements outside every segment are never written.
  for (std::size_t i = 40; i < 50; ++i) EXPECT_EQ(params[i], initial[i]);
  for (std::size_t i = 151; i < kSize; ++i) EXPECT_EQ(params[i], initial[i]);

  // The packed state, segment by segment in the order given.
  const std::vector<StateTensor> state = optimizer->state();
  std::vector<const std::vector<std::vector<double>>*> expected;
  if (config.name == "adam" || config.name == "adamw") {
    expected = {&naive.exp_avg(), &naive.exp_avg_sq()};
  } else if (config.momentum > 0.0) {
    expected = {&naive.momentum()};
  }
  ASSERT_EQ(state.size(), expected.size());
  for (std::size_t k = 0; k < state.size(); ++k) {
    std::size_t at = 0;
    for (const std::vector<double>& segment_state : *expected[k]) {
      for (double value : segment_state) {
        ASSERT_NEAR(state[k].values[at], value, 2e-5 * (1.0 + std::abs(value)))
            << state[k].name << " element " << at;
        ++at;
      }
    }
    EXPECT_EQ(at, state[k].values.size());
  }
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, NaiveTwin, ::testing::ValuesIn(twin_cases()),
                         [](const ::testing::TestParamInfo<TwinCase>& param_info) {
                           return param_info.param.label;
                         });

}  // namespace
}  // namespace dtrain::optim
