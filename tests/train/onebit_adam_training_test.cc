// 1-bit Adam in data-parallel training (optim.name = "onebit_adam"; docs/COMPRESSION.md): its
// warm-up trains Adam's trajectory bit for bit, a resume on as many ranks continues bitwise in
// either phase (the checkpoint holds m, v, the step count and every rank's worker and server error
// feedback), and settings it cannot work with are refused by name.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/parallel/onebit_allreduce.h"
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
    const std::string plain_run = dir("adam");
    EXPECT_NE(uninterrupted, allreduce_training(plain, 3, plain_run));
    // The resumed run's predicted bytes per step count its own steps before the freeze (none when
    // it froze before the resume at step 10): W' f32 allreduces (Adam's figure) and 10 - W' 1-bit
    // exchanges, over its 10 steps.
    const auto summary = [](const std::string& folder) {
      std::ifstream in(std::filesystem::path(folder) / "summary.json");
      return nlohmann::json::parse(in);
    };
    const nlohmann::json resumed = summary(run);
    const double allreduce =
        summary(plain_run)["parallel"]["predicted_bytes_sent_per_rank_and_step"];
    const auto onebit = static_cast<double>(
        parallel::OneBitAllreduce::bytes_sent(resumed["parameters"].get<std::int64_t>(), 3));
    const double warm = std::clamp(static_cast<double>(freeze) - 10.0, 0.0, 10.0);
    const double predicted = resumed["parallel"]["predicted_bytes_sent_per_rank_and_step"];
    EXPECT_DOUBLE_EQ(predicted, (warm * allreduce + (10.0 - warm) * onebit) / 10.0);
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
