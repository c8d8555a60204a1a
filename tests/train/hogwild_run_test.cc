// Hogwild! runs keep checkpoints (the shared parameters at epoch ends, once the threads joined) and
// `--resume` continues them: with one thread (sequential SGD) bitwise as the uninterrupted run,
// with several from exactly the checkpoint's parameters to a sane accuracy.
#include "dtrain/train/strategies/hogwild/hogwild_run.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "dtrain/base/error.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using dtrain::testing::TempDir;

Config sparse_config(int threads, std::int64_t epochs) {
  Config c;
  c.model.name = "logistic";
  c.data.dataset = "sparse-synthetic";
  c.data.synthetic_samples = 4000;
  c.data.synthetic_test_samples = 1000;
  c.data.sparse_features = 500;
  c.data.sparse_nonzeros = 10;
  c.data.sparse_label_noise = 0.02;
  c.train.epochs = epochs;
  c.train.seed = 5;
  c.train.keep_checkpoints = 0;
  c.optim.name = "sgd";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.5;
  c.parallel.strategy = "hogwild";
  c.parallel.workers = threads;
  c.parallel.trace_steps = 0;
  return c;
}

std::vector<float> params_at(const fs::path& run, std::int64_t epoch) {
  return read_checkpoint((run / "checkpoints" / fmt::format("epoch-{}.ckpt", epoch)).string())
      .params;
}

TEST(HogwildCheckpoints, OneThreadResumesBitwiseAndSeveralFromTheCheckpointsParameters) {
  TempDir tmp;
  const TrainerOptions quiet{"", false, true, stderr, nullptr, nullptr};
  auto options = [&](const std::string& name, bool resume) {
    TrainerOptions o = quiet;
    o.run_dir = (tmp.path() / name).string();
    o.resume = resume;
    return o;
  };
  // One thread is sequential SGD: the resumed run is the uninterrupted one, bit for bit, which it
  // can only be if it started from exactly the checkpoint's parameters.
  run_hogwild(sparse_config(1, 3), options("whole", false));
  run_hogwild(sparse_config(1, 1), options("split", false));
  const RunSummary resumed = run_hogwild(sparse_config(1, 3), options("split", true));
  EXPECT_EQ(resumed.resumed_from_epoch, 1);
  EXPECT_EQ(params_at(tmp.path() / "split", 3), params_at(tmp.path() / "whole", 3));
  EXPECT_EQ(params_at(tmp.path() / "split", 1), params_at(tmp.path() / "whole", 1));

  // Two racing threads: the checkpoint is what the epoch left; the resumed run trains on.
  run_hogwild(sparse_config(2, 1), options("racing", false));
  const std::vector<float> saved = params_at(tmp.path() / "racing", 1);
  EXPECT_GT(std::count_if(saved.begin(), saved.end(), [](float w) { return w != 0.0f; }), 100);
  const RunSummary two = run_hogwild(sparse_config(2, 3), options("racing", true));
  EXPECT_EQ(two.epochs, 3);
  EXPECT_GT(two.final_test_accuracy, 0.7);
  EXPECT_NE(params_at(tmp.path() / "racing", 3), saved);

  // Nothing left to train, and a checkpoint of another model, are named.
  EXPECT_THAT([&] { run_hogwild(sparse_config(2, 3), options("racing", true)); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("nothing left to train")));
  Config other = sparse_config(1, 4);
  other.data.sparse_features = 400;
  EXPECT_THAT([&] { run_hogwild(other, options("whole", true)); },
              ::testing::ThrowsMessage<CheckpointError>(::testing::HasSubstr("weights")));
}

}  // namespace
}  // namespace dtrain::train
