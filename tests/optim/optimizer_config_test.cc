// make_optimizer: each bad key is a ConfigError naming the key, the value and what is accepted;
// bad segments are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {
namespace {

using ::testing::HasSubstr;

const std::vector<Segment> kSegments = {{"w", 0, 4, true}};

struct BadConfig {
  std::function<void(OptimizerConfig&)> edit;
  std::vector<std::string> message_parts;
};

TEST(OptimizerConfig, BadKeysNameTheKeyAndTheAcceptedValues) {
  const std::vector<BadConfig> cases = {
      {[](OptimizerConfig& c) { c.name = "rmsprop"; },
       {"optim.name = 'rmsprop'", "'sgd', 'adam', 'adamw', 'lars'"}},
      {[](OptimizerConfig& c) { c.momentum = 1.0; }, {"optim.momentum = 1", "[0, 1)"}},
      {[](OptimizerConfig& c) { c.momentum = -0.5; }, {"optim.momentum = -0.5", "[0, 1)"}},
      {[](OptimizerConfig& c) { c.weight_decay = -1e-4; },
       {"optim.weight_decay = -0.0001", ">= 0"}},
      {[](OptimizerConfig& c) {
         c.name = "adam";
         c.beta1 = 1.0;
       },
       {"optim.beta1 = 1", "[0, 1)"}},
      {[](OptimizerConfig& c) {
         c.name = "adamw";
         c.beta2 = -0.1;
       },
       {"optim.beta2 = -0.1", "[0, 1)"}},
      {[](OptimizerConfig& c) {
         c.name = "adam";
         c.eps = 0.0;
       },
       {"optim.eps = 0", "> 0"}},
      {[](OptimizerConfig& c) {
         c.name = "lars";
         c.trust_coefficient = 0.0;
       },
       {"optim.trust_coefficient = 0", "> 0"}},
      {[](OptimizerConfig& c) {
         c.name = "lars";
         c.lars_eps = -1.0;
       },
       {"optim.lars_eps = -1", ">= 0"}},
      {[](OptimizerConfig& c) { c.nesterov = true; }, {"optim.nesterov", "optim.momentum > 0"}},
      {[](OptimizerConfig& c) {
         c.name = "lars";
         c.momentum = 0.9;
         c.nesterov = true;
       },
       {"optim.nesterov", "'sgd'", "'lars'"}},
      {[](OptimizerConfig& c) {
         c.name = "adamw";
         c.momentum = 0.9;
       },
       {"optim.momentum = 0.9", "'adamw'", "optim.beta1"}},
  };
  for (const BadConfig& bad : cases) {
    OptimizerConfig config;
    bad.edit(config);
    SCOPED_TRACE(bad.message_parts.front());
    try {
      make_optimizer(config, kSegments);
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& error) {
      for (const std::string& part : bad.message_parts) EXPECT_THAT(error.what(), HasSubstr(part));
    }
    EXPECT_THROW(validate_optimizer_config(config), ConfigError);
  }
}

TEST(OptimizerConfig, GoodConfigsBuildTheirOptimizer) {
  for (const char* name : {"sgd", "adam", "adamw", "lars"}) {
    OptimizerConfig config;
    config.name = name;
    std::unique_ptr<Optimizer> optimizer = make_optimizer(config, kSegments);
    ASSERT_NE(optimizer, nullptr);
    EXPECT_EQ(optimizer->segments().size(), 1u);
    EXPECT_EQ(optimizer->segments()[0].name, "w");
    EXPECT_EQ(optimizer->state_numel(), 4);
    EXPECT_EQ(optimizer->steps(), 0);
  }
}

TEST(OptimizerConfig, OverlappingSegmentsAreRefusedByName) {
  OptimizerConfig config;
  try {
    make_optimizer(config, {{"fc1.weight", 0, 10, true}, {"fc1.bias", 8, 4, false}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'fc1.weight' [0, 10)"));
    EXPECT_THAT(error.what(), HasSubstr("'fc1.bias' [8, 12)"));
  }
  try {
    make_optimizer(config, {{"w", 0, -3, true}});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'w'"));
    EXPECT_THAT(error.what(), HasSubstr("numel -3"));
  }
}

TEST(OptimizerConfig, NoSegmentsIsAnEmptyButValidOptimizer) {
  OptimizerConfig config;
  config.momentum = 0.9;
  std::unique_ptr<Optimizer> optimizer = make_optimizer(config, {});
  float nothing = 3.0f;
  optimizer->step(&nothing, &nothing, 0.1);
  EXPECT_EQ(nothing, 3.0f);
  EXPECT_EQ(optimizer->steps(), 1);
  EXPECT_EQ(optimizer->state_numel(), 0);
}

}  // namespace
}  // namespace dtrain::optim
