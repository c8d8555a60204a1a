// 1-bit Adam in data-parallel training (optim.name = "onebit_adam"; docs/COMPRESSION.md): its
// warm-up trains Adam's trajectory bit for bit, a resume on as many ranks continues bitwise in
// either phase (the checkpoint holds m, v, the step count and every rank's worker and server error
// feedback), and settings it cannot work with are refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/config.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class OneBitAdamTrainingTest : public testing::ParallelTrainingTest {
 protected:
  static Config adam(const std::string& name, std::int64_t freeze_step) {
    Config c = mlp_config();  // 10 steps per epoch
    c.optim.name = name;
    c.optim.lr = 0.01;
    c.optim.momentum = 0.0;
    c.optim.freeze_step = freeze_step;
    c.data_parallel.zero_stage = std::string("0");
    return c;
  }
};

TEST_F(OneBitAdamTrainingTest, WarmUpEqualsAdamBitForBit) {
  // One epoch of 10 steps, all of them warm-up.
  EXPECT_EQ(allreduce_training(adam("onebit_adam", 10), 2),
            allreduce_training(adam("adam", 10), 2));
}

TEST_F(OneBitAdamTrainingTest, ResumeOnAsManyRanksEqualsTheUninterruptedRun) {
  // Frozen before the resume (step 4), and after it (step 14).
  for (std::int64_t freeze : {4, 14}) {
    SCOPED_TRACE(fmt::format("freeze_step {}", freeze));
    Config config = adam("onebit_adam", freeze);
    config.train.epochs = 2;
    config.train.checkpoint_every = 1;
    const std::vector<float> uninterrupted = allreduce_training(config, 3);
    const std::string run = dir("resume");
    Config first = config;
    first.train.epochs = 1;
    allreduce_training(first, 3, run);
    EXPECT_EQ(allreduce_training(config, 3, run, /*resume=*/true), uninterrupted);
    // And the frozen phase is not Adam: the same 2 epochs with plain Adam end elsewhere.
    Config plain = adam("adam", freeze);
    plain.train.epochs = 2;
    EXPECT_NE(uninterrupted, allreduce_training(plain, 3));
  }
}

TEST_F(OneBitAdamTrainingTest, SettingsItCannotWorkWithAreRefusedByName) {
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{{"parallel.strategy", "local_sgd"},
                                                        {"data_parallel.compression", "topk:0.01"},
                                                        {"data_parallel.zero_stage", "1"},
                                                        {"optim.freeze_step", "0"}}) {
    Config config = adam("onebit_adam", 4);
    config.parallel.workers = 2;
    try {
      apply_override(config, key + "=" + value);
      validate(config);
      ADD_FAILURE() << key << " = " << value << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(
          std::string(e.what()).find(key == "optim.freeze_step" ? "freeze_step" : "onebit_adam"),
          std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace dtrain::train
