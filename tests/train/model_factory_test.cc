// TrainerOptions::make_model, the seam through which a C++ user trains a model built in code
// (docs/LIBRARY.md, examples/cpp/): a factory that builds the zoo's model trains the zoo's
// trajectory bit for bit, a model of its own learns on two workers as on one, and the factory's
// mistakes and the strategies that cannot take it fail with a message naming what to do.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/trainer.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

// 256 samples of (1, 4, 4) in 4 classes, global batch 32: 8 steps per epoch, even over 2 ranks.
Config small_config() {
  Config c;
  c.data.dataset = "synthetic";
  c.data.synthetic_samples = 256;
  c.data.synthetic_test_samples = 64;
  c.data.synthetic_classes = 4;
  c.data.synthetic_shape = {1, 4, 4};
  c.data.synthetic_noise = 0.8;
  c.model.name = "mlp";
  c.model.hidden = {16};
  c.train.epochs = 3;
  c.train.batch_size = 32;
  c.train.seed = 7;
  c.train.log_every = 1;
  c.train.checkpoint_every = 0;
  c.optim.lr = 0.05;
  c.optim.momentum = 0.9;
  c.parallel.trace_steps = 0;
  return c;
}

TrainerOptions quiet_options(const std::string& run_dir) {
  TrainerOptions options;
  options.run_dir = run_dir;
  options.quiet = true;
  return options;
}

// flatten, linear 16, LayerNorm, GELU, linear: no model of the zoo.
std::unique_ptr<nn::Model> own_model(const tensor::Shape& sample, std::int64_t classes) {
  auto model = std::make_unique<nn::Model>(sample);
  model->add(std::make_unique<nn::Flatten>("flatten"));
  model->add(std::make_unique<nn::Linear>("fc1", sample[0] * sample[1] * sample[2], 16));
  model->add(std::make_unique<nn::LayerNorm>("norm", 16));
  model->add(std::make_unique<nn::Activation>("gelu", nn::ActivationKind::kGelu));
  model->add(std::make_unique<nn::Linear>("fc2", 16, classes, nn::InitKind::kXavier));
  return model;  // not built: the Trainer builds it
}

std::vector<double> step_losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["kind"] == "step") out.push_back(record["loss"].get<double>());
  }
  return out;
}

TEST(ModelFactory, BuildingTheZoosModelTrainsItsTrajectoryBitwise) {
  testing::TempDir tmp;
  const Config config = small_config();
  Trainer zoo(config, quiet_options(tmp.file("zoo")));
  const RunSummary zoo_summary = zoo.run();

  TrainerOptions options = quiet_options(tmp.file("factory"));
  options.make_model = [&](const tensor::Shape& sample, std::int64_t classes) {
    return nn::build_model(model_spec(config.model, sample, classes));
  };
  Trainer factory(config, options);
  const RunSummary factory_summary = factory.run();

  EXPECT_EQ(factory_summary.model, "custom");
  EXPECT_EQ(zoo_summary.model, "mlp");
  EXPECT_EQ(factory_summary.final_train_loss, zoo_summary.final_train_loss);
  const nn::ParamStore& a = zoo.model().store();
  const nn::ParamStore& b = factory.model().store();
  ASSERT_EQ(a.num_params(), b.num_params());
  EXPECT_EQ(std::vector<float>(a.params(), a.params() + a.num_params()),
            std::vector<float>(b.params(), b.params() + b.num_params()));
}

TEST(ModelFactory, AModelOfItsOwnLearnsOnTwoWorkersAsOnOne) {
  testing::TempDir tmp;
  Config config = small_config();
  std::atomic<int> calls{0};
  auto counted = [&](const tensor::Shape& sample, std::int64_t classes) {
    ++calls;
    return own_model(sample, classes);
  };
  TrainerOptions options = quiet_options(tmp.file("one"));
  options.make_model = counted;
  const RunSummary one = run_training(config, options);
  EXPECT_EQ(calls.load(), 1);

  config.parallel.workers = 2;
  options.run_dir = tmp.file("two");
  const RunSummary two = run_training(config, options);
  EXPECT_EQ(calls.load(), 3);  // once per rank

  EXPECT_EQ(two.model, "custom");
  // 32 + 4 + ... : fc1 (16 x 16 + 16), norm (2 x 16), fc2 (4 x 16 + 4).
  EXPECT_EQ(two.parameters, 16 * 16 + 16 + 2 * 16 + 4 * 16 + 4);
  // Data parallelism averages the two halves of each batch: one worker's trajectory (ring
  // allreduce sums in another order, so not bitwise).
  EXPECT_NEAR(two.final_train_loss, one.final_train_loss, 1e-5 * one.final_train_loss);
  const std::vector<double> losses = step_losses(tmp.file("two"));
  ASSERT_EQ(losses.size(), 24u);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << fmt::format("{}", fmt::join(losses, " "));
  EXPECT_GT(two.final_test_accuracy, 0.7);
}

// The other strategies that run one Trainer per rank: the factory's model learns under each.
TEST(ModelFactory, EveryStrategyWithATrainerPerRankTrainsIt) {
  testing::TempDir tmp;
  for (const std::string strategy : {"local_sgd", "decentralized", "pipeline"}) {
    Config config = small_config();
    config.parallel.strategy = strategy;
    config.parallel.workers = 2;
    TrainerOptions options = quiet_options(tmp.file(strategy));
    options.make_model = own_model;
    const RunSummary summary = run_training(config, options);
    EXPECT_EQ(summary.model, "custom") << strategy;
    const std::vector<double> losses = step_losses(tmp.file(strategy));
    ASSERT_EQ(losses.size(), 24u) << strategy;
    EXPECT_LT(losses.back(), 0.5 * losses.front()) << strategy;
  }
}

TEST(ModelFactory, LayersThatDoNotFitNameTheLayerAndBothShapes) {
  testing::TempDir tmp;
  TrainerOptions options = quiet_options(tmp.file("run"));
  options.make_model = [](const tensor::Shape& sample, std::int64_t classes) {
    auto model = std::make_unique<nn::Model>(sample);
    model->add(std::make_unique<nn::Flatten>("flatten"));
    model->add(std::make_unique<nn::Linear>("fc_wrong", 15, classes));  // 16 features come in
    return model;
  };
  try {
    Trainer trainer(small_config(), options);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("fc_wrong"));
    EXPECT_THAT(e.what(), HasSubstr("16"));
    EXPECT_THAT(e.what(), HasSubstr("15"));
  }
}

TEST(ModelFactory, AModelForOtherSamplesIsRefusedWithBothShapes) {
  testing::TempDir tmp;
  TrainerOptions options = quiet_options(tmp.file("run"));
  options.make_model = [](const tensor::Shape&, std::int64_t classes) {
    return own_model({1, 28, 28}, classes);
  };
  try {
    Trainer trainer(small_config(), options);
    FAIL() << "expected a ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("[1, 28, 28]"));
    EXPECT_THAT(e.what(), HasSubstr("[1, 4, 4]"));
    EXPECT_THAT(e.what(), HasSubstr("sample_shape"));
  }
}

TEST(ModelFactory, NoModelIsRefused) {
  testing::TempDir tmp;
  TrainerOptions options = quiet_options(tmp.file("run"));
  options.make_model = [](const tensor::Shape&, std::int64_t) {
    return std::unique_ptr<nn::Model>();
  };
  EXPECT_THROW(
      {
        try {
          Trainer trainer(small_config(), options);
        } catch (const ConfigError& e) {
          EXPECT_THAT(e.what(), HasSubstr("returned no model"));
          throw;
        }
      },
      ConfigError);
}

TEST(ModelFactory, StrategiesThatBuildTheirModelFromItsNameRefuseAFactory) {
  testing::TempDir tmp;
  for (const std::string strategy : {"parameter_server", "hogwild"}) {
    Config config = small_config();
    config.parallel.strategy = strategy;
    config.parallel.workers = 2;
    TrainerOptions options = quiet_options(tmp.file(strategy));
    options.make_model = own_model;
    try {
      run_training(config, options);
      FAIL() << strategy << ": expected a ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("\"{}\"", strategy)));
      EXPECT_THAT(e.what(), HasSubstr("make_model"));
      EXPECT_THAT(e.what(), HasSubstr("data_parallel"));
      EXPECT_THAT(e.what(), ::testing::Not(HasSubstr("hogwild,")));
    }
  }
}

TEST(ModelFactory, ATrainerRefusesItUnderAStrategyThatBuildsItsOwnModel) {
  testing::TempDir tmp;
  Config config = small_config();
  config.parallel.strategy = "parameter_server";
  TrainerOptions options = quiet_options(tmp.file("run"));
  options.make_model = own_model;
  try {
    Trainer trainer(config, options);
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("make_model"));
  }
}

}  // namespace
}  // namespace dtrain::train
