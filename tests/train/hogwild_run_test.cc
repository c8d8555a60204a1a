// Hogwild! runs keep checkpoints (the shared parameters at epoch ends, once the threads joined) and
// `--resume` continues them: with one thread (sequential SGD) bitwise as the uninterrupted run,
// with several from exactly the checkpoint's parameters to a sane accuracy.
#include "dtrain/train/strategies/hogwild/hogwild_run.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtrain/base/error.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/memory_checkpoint.h"
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
  // Past the end as configured (fewer epochs than done), summary.json missing: refused, not a
  // summary of 2 epochs.
  fs::remove(tmp.path() / "racing" / "summary.json");
  EXPECT_THAT([&] { run_hogwild(sparse_config(2, 2), options("racing", true)); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr(
                  "epoch-3.ckpt is past --epochs 2 (3 epochs done); give --epochs 4 or more")));
  EXPECT_FALSE(fs::exists(tmp.path() / "racing" / "summary.json"));
  Config other = sparse_config(1, 4);
  other.data.sparse_features = 400;
  EXPECT_THAT([&] { run_hogwild(other, options("whole", true)); },
              ::testing::ThrowsMessage<CheckpointError>(::testing::HasSubstr("weights")));
}

// Keeps only checkpoint `name` of a copy of run `from` (so that --resume starts there).
void keep_only(const fs::path& from, const fs::path& to, const std::string& name) {
  fs::copy(from, to, fs::copy_options::recursive);
  for (const auto& entry : fs::directory_iterator(to / "checkpoints")) {
    if (entry.path().filename() != name) fs::remove(entry.path());
  }
}

TEST(HogwildCheckpoints, StepCheckpointsPauseTheThreadsAndOneThreadResumesInsideAnEpochBitwise) {
  TempDir tmp;
  const TrainerOptions quiet{"", false, true, stderr, nullptr, nullptr};
  auto options = [&](const std::string& name, bool resume) {
    TrainerOptions o = quiet;
    o.run_dir = (tmp.path() / name).string();
    o.resume = resume;
    return o;
  };
  run_hogwild(sparse_config(1, 2), options("whole", false));
  // 4000 samples in chunks of 1024: 4 steps of thread 0 per epoch; every 3rd is a checkpoint,
  // after 3072 samples of epoch 1 and 2048 of epoch 2 (4000 + 2048 updates).
  Config clocked = sparse_config(1, 2);
  clocked.train.checkpoint_every_steps = 3;
  run_hogwild(clocked, options("clocked", false));
  const Checkpoint first =
      read_checkpoint((tmp.path() / "clocked/checkpoints/epoch-0-step-3072.ckpt").string());
  EXPECT_EQ(first.sampler_epoch, 0);
  EXPECT_EQ(first.sampler_position, 3072);
  const Checkpoint second =
      read_checkpoint((tmp.path() / "clocked/checkpoints/epoch-1-step-6048.ckpt").string());
  EXPECT_EQ(second.sampler_position, 2048);
  // Pausing changes no value.
  EXPECT_EQ(params_at(tmp.path() / "clocked", 2), params_at(tmp.path() / "whole", 2));
  // Resumed from either one: the uninterrupted run, bit for bit.
  for (const std::string name : {"epoch-0-step-3072.ckpt", "epoch-1-step-6048.ckpt"}) {
    const fs::path cut = tmp.path() / ("cut-" + name);
    keep_only(tmp.path() / "clocked", cut, name);
    run_hogwild(clocked, options(cut.filename().string(), true));
    EXPECT_EQ(params_at(cut, 2), params_at(tmp.path() / "whole", 2)) << name;
  }

  // The memory tier: a slot holding the checkpoint inside epoch 1 (what a run killed after it
  // leaves) is where --resume starts, bitwise again; the finished run deletes the slot file.
  Config memory = sparse_config(1, 2);
  memory.train.memory_checkpoint_every_steps = 2;
  memory.train.memory_checkpoint_folder = (tmp.path() / "shm").string();
  fs::create_directories(tmp.path() / "shm");
  const fs::path killed = tmp.path() / "killed";
  fs::create_directories(killed / "checkpoints");
  MemoryCheckpoint slots(killed.string(), memory.train.memory_checkpoint_folder);
  slots.save(first);
  run_hogwild(memory, options("killed", true));
  EXPECT_EQ(params_at(killed, 2), params_at(tmp.path() / "whole", 2));
  EXPECT_FALSE(fs::exists(slots.path()));
  // It started inside epoch 1 (not over): that epoch trained its last 928 samples only.
  std::ifstream records(killed / "metrics.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(records, line));
  EXPECT_EQ(nlohmann::json::parse(line)["updates"].get<std::int64_t>(), 4000 - 3072);

  // A stop signal pauses the threads at the next step: a checkpoint inside the epoch, from which
  // the resume again equals the uninterrupted run.
  set_stop_request_for_test(SIGTERM);
  const RunSummary stopped = run_hogwild(sparse_config(1, 2), options("stopped", false));
  set_stop_request_for_test(0);
  EXPECT_EQ(stopped.stopped_by_signal, SIGTERM);
  EXPECT_EQ(read_checkpoint((tmp.path() / "stopped/checkpoints/epoch-0-step-1024.ckpt").string())
                .sampler_position,
            1024);
  run_hogwild(sparse_config(1, 2), options("stopped", true));
  EXPECT_EQ(params_at(tmp.path() / "stopped", 2), params_at(tmp.path() / "whole", 2));

  // Two racing threads meet at the pause: the position is whole chunks, the resume trains on.
  Config racing = sparse_config(2, 2);
  racing.data.synthetic_samples = 65536;  // 64 chunks per epoch
  racing.train.checkpoint_every_steps = 1;
  run_hogwild(racing, options("racing", false));
  std::int64_t inside = 0;
  for (const auto& entry : fs::directory_iterator(tmp.path() / "racing/checkpoints")) {
    const std::string name = entry.path().filename().string();
    if (name.find("-step-") == std::string::npos) continue;
    const Checkpoint c = read_checkpoint(entry.path().string());
    EXPECT_EQ(c.sampler_position % 1024, 0) << name;
    EXPECT_GT(c.sampler_position, 0) << name;
    ++inside;
  }
  EXPECT_GE(inside, 2);
}

}  // namespace
}  // namespace dtrain::train
