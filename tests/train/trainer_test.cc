// Trainer on small synthetic runs: learning, bitwise determinism, resume equals an uninterrupted
// run, the run folder's files, and the errors around run folders.
#include "dtrain/train/trainer.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/memory_checkpoint.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ =
        fs::temp_directory_path() / fmt::format("dtrain_trainer_{}_{}", info->name(), ::getpid());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string dir(const std::string& name) const { return (root_ / name).string(); }

  // 300 training samples in batches of 32: 9 full batches and one of 12 per epoch.
  static Config small_config() {
    Config c;
    c.data.dataset = "synthetic";
    c.data.synthetic_samples = 300;
    c.data.synthetic_test_samples = 100;
    c.data.synthetic_classes = 4;
    c.data.synthetic_shape = {1, 4, 4};
    c.data.synthetic_noise = 0.8;
    c.model.name = "mlp";
    c.model.hidden = {16};
    c.model.dropout = 0.1;  // exercises the per-step random streams
    c.train.epochs = 4;
    c.train.batch_size = 32;
    c.train.seed = 5;
    c.train.log_every = 1;
    c.train.checkpoint_every = 1;
    c.train.keep_checkpoints = 0;
    c.train.accuracy_targets = {0.5, 0.9999};
    c.optim.lr = 0.05;
    c.optim.momentum = 0.9;
    return c;
  }

  static RunSummary train(const Config& config, const std::string& run_dir, bool resume = false) {
    Trainer trainer(config,
                    TrainerOptions{run_dir, resume, /*quiet=*/true, stderr, nullptr, nullptr});
    return trainer.run();
  }

  static std::vector<nlohmann::json> records(const std::string& run_dir, const std::string& kind) {
    std::ifstream in(run_dir + "/metrics.jsonl");
    std::vector<nlohmann::json> out;
    std::string line;
    while (std::getline(in, line)) {
      auto record = nlohmann::json::parse(line);
      if (record["kind"] == kind) out.push_back(record);
    }
    return out;
  }

  static std::vector<double> losses(const std::string& run_dir) {
    std::vector<double> out;
    for (const auto& record : records(run_dir, "step")) out.push_back(record["loss"].get<double>());
    return out;
  }

  static std::vector<float> final_params(const std::string& run_dir, std::int64_t epoch) {
    return read_checkpoint(fmt::format("{}/checkpoints/epoch-{}.ckpt", run_dir, epoch)).params;
  }

  fs::path root_;
};

TEST_F(TrainerTest, LearnsTheSyntheticProblemAndWritesTheRunFolder) {
  const Config config = small_config();
  const RunSummary summary = train(config, dir("run"));
  EXPECT_GT(summary.final_test_accuracy, 0.9);  // chance is 0.25
  EXPECT_GE(summary.best_test_accuracy, summary.final_test_accuracy);
  EXPECT_EQ(summary.steps, 4 * 10);  // ceil(300 / 32) = 10 steps per epoch, partial batch used
  EXPECT_EQ(summary.samples, 4 * 300);
  EXPECT_EQ(summary.resumed_from_epoch, 0);

  for (const char* file : {"resolved.toml", "metrics.jsonl", "summary.json", "checkpoints/latest",
                           "checkpoints/epoch-1.ckpt", "checkpoints/epoch-4.ckpt"}) {
    EXPECT_TRUE(fs::exists(dir("run") + "/" + file)) << file;
  }
  EXPECT_EQ(load_config(dir("run") + "/resolved.toml"), config);

  const auto epochs = records(dir("run"), "epoch");
  ASSERT_EQ(epochs.size(), 4u);
  EXPECT_EQ(epochs.back()["epoch"], 4);
  EXPECT_EQ(epochs.back()["step"], 40);
  EXPECT_LT(epochs.back()["train_loss"].get<double>(), epochs.front()["train_loss"].get<double>());
  EXPECT_DOUBLE_EQ(epochs.back()["test_accuracy"].get<double>(), summary.final_test_accuracy);
  EXPECT_EQ(records(dir("run"), "step").size(), 40u);  // log_every = 1

  const auto doc = nlohmann::json::parse(read_whole_file(dir("run") + "/summary.json"));
  EXPECT_DOUBLE_EQ(doc["final_test_accuracy"].get<double>(), summary.final_test_accuracy);
  ASSERT_TRUE(doc["time_to_accuracy"]["0.5"].is_number());
  EXPECT_GT(doc["time_to_accuracy"]["0.5"].get<double>(), 0.0);
  EXPECT_LE(doc["time_to_accuracy"]["0.5"].get<double>(), summary.train_seconds);
  EXPECT_EQ(doc["parameters"], 16 * 16 + 16 + 16 * 4 + 4);
}

TEST_F(TrainerTest, SameSeedGivesBitwiseIdenticalLosses) {
  Config config = small_config();
  config.train.threads = 2;
  train(config, dir("a"));
  train(config, dir("b"));
  const auto a = losses(dir("a"));
  const auto b = losses(dir("b"));
  ASSERT_EQ(a.size(), 40u);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(a[i], b[i]) << "step " << i + 1;
  EXPECT_EQ(final_params(dir("a"), 4), final_params(dir("b"), 4));

  // The comparison can fail: another seed gives other losses.
  config.train.seed = 6;
  train(config, dir("c"));
  EXPECT_NE(losses(dir("c")), a);
}

TEST_F(TrainerTest, ResumeFromAMiddleCheckpointEqualsTheUninterruptedRun) {
  // Adam (whose update depends on its step count), cosine decay (on the global step) and dropout
  // (on the seed and step): everything a resume must restore.
  Config config = small_config();
  config.optim.name = "adam";
  config.optim.momentum = 0.0;
  config.optim.lr = 0.01;
  config.schedule.decay = "cosine";
  config.schedule.min_lr = 0.001;
  train(config, dir("full"));

  // An interrupted copy: the run stopped after epoch 2 (later checkpoints never written).
  fs::copy(dir("full"), dir("cut"), fs::copy_options::recursive);
  fs::remove(dir("cut") + "/checkpoints/epoch-3.ckpt");
  fs::remove(dir("cut") + "/checkpoints/epoch-4.ckpt");
  write_file_atomically(dir("cut") + "/checkpoints/latest", "epoch-2.ckpt\n");

  const Config resolved = load_config(dir("cut") + "/resolved.toml");
  const RunSummary resumed = train(resolved, dir("cut"), /*resume=*/true);
  EXPECT_EQ(resumed.resumed_from_epoch, 2);
  EXPECT_EQ(resumed.steps, 40);
  EXPECT_EQ(resumed.samples, 1200);
  EXPECT_EQ(final_params(dir("cut"), 4), final_params(dir("full"), 4));
  EXPECT_EQ(read_checkpoint(dir("cut") + "/checkpoints/epoch-4.ckpt").optimizer_state,
            read_checkpoint(dir("full") + "/checkpoints/epoch-4.ckpt").optimizer_state);
  // metrics.jsonl reads as one run: the losses of the resumed epochs equal the original ones.
  EXPECT_EQ(losses(dir("cut")), losses(dir("full")));
  EXPECT_EQ(records(dir("cut"), "epoch").size(), 4u);
}

TEST_F(TrainerTest, ExtendingARunWithMoreEpochsEqualsTheLongerRun) {
  Config config = small_config();
  config.train.epochs = 2;
  train(config, dir("short"));
  config.train.epochs = 4;
  train(config, dir("long"));
  Config resolved = load_config(dir("short") + "/resolved.toml", {"train.epochs=4"});
  train(resolved, dir("short"), /*resume=*/true);
  EXPECT_EQ(final_params(dir("short"), 4), final_params(dir("long"), 4));
  EXPECT_EQ(load_config(dir("short") + "/resolved.toml").train.epochs, 4);
}

TEST_F(TrainerTest, RunFolderErrors) {
  Config config = small_config();
  config.train.epochs = 1;
  train(config, dir("run"));
  try {
    train(config, dir("run"));
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("already holds a run"));
    EXPECT_THAT(e.what(), HasSubstr("--resume"));
  }
  try {
    train(config, dir("run"), /*resume=*/true);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nothing left to train"));
  }
  // A corrupt checkpoint is refused, not loaded, and the failed resume leaves the run folder as
  // it was: resolved.toml still says epochs = 1.
  config.train.epochs = 2;
  std::string bytes = read_whole_file(dir("run") + "/checkpoints/epoch-1.ckpt");
  bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x40);
  write_file_atomically(dir("run") + "/checkpoints/epoch-1.ckpt", bytes);
  const std::string resolved = read_whole_file(dir("run") + "/resolved.toml");
  const std::string metrics = read_whole_file(dir("run") + "/metrics.jsonl");
  EXPECT_THROW(train(config, dir("run"), /*resume=*/true), CheckpointError);
  EXPECT_EQ(read_whole_file(dir("run") + "/resolved.toml"), resolved);
  EXPECT_EQ(read_whole_file(dir("run") + "/metrics.jsonl"), metrics);
}

// Checkpoints inside an epoch (train.checkpoint_every_steps): a run cut at any of them resumes to
// the same parameters, optimizer state and step losses as the uninterrupted run, and its epoch
// records (whose sums a mid-epoch checkpoint carries) are the same too.
TEST_F(TrainerTest, ResumeFromAStepCheckpointInsideAnEpochEqualsTheUninterruptedRun) {
  Config config = small_config();
  config.optim.name = "adam";
  config.optim.momentum = 0.0;
  config.optim.lr = 0.01;
  config.train.epochs = 3;
  config.train.checkpoint_every_steps = 7;  // steps 7, 14, 21, 28: inside epochs 1, 2, 3
  train(config, dir("full"));
  EXPECT_TRUE(fs::exists(dir("full") + "/checkpoints/epoch-1-step-14.ckpt"));
  EXPECT_TRUE(fs::exists(dir("full") + "/checkpoints/epoch-2-step-21.ckpt"));

  for (const char* cut : {"epoch-0-step-7.ckpt", "epoch-1-step-14.ckpt", "epoch-2-step-28.ckpt"}) {
    SCOPED_TRACE(cut);
    fs::remove_all(dir("cut"));
    fs::copy(dir("full"), dir("cut"), fs::copy_options::recursive);
    const std::string name = cut;
    for (const auto& entry : fs::directory_iterator(dir("cut") + "/checkpoints")) {
      const std::string file = entry.path().filename().string();
      // Later checkpoints than the cut were never written.
      const Checkpoint c = file == "latest" ? Checkpoint{} : read_checkpoint(entry.path());
      if (file != "latest" &&
          c.global_step > read_checkpoint(dir("full") + "/checkpoints/" + name).global_step) {
        fs::remove(entry.path());
      }
    }
    write_file_atomically(dir("cut") + "/checkpoints/latest", name + "\n");
    const RunSummary resumed = train(load_config(dir("cut") + "/resolved.toml"), dir("cut"), true);
    EXPECT_EQ(resumed.steps, 30);
    EXPECT_EQ(resumed.samples, 900);
    EXPECT_EQ(final_params(dir("cut"), 3), final_params(dir("full"), 3));
    EXPECT_EQ(read_checkpoint(dir("cut") + "/checkpoints/epoch-3.ckpt").optimizer_state,
              read_checkpoint(dir("full") + "/checkpoints/epoch-3.ckpt").optimizer_state);
    EXPECT_EQ(losses(dir("cut")), losses(dir("full")));
    const auto cut_epochs = records(dir("cut"), "epoch");
    const auto full_epochs = records(dir("full"), "epoch");
    ASSERT_EQ(cut_epochs.size(), full_epochs.size());
    for (std::size_t e = 0; e < cut_epochs.size(); ++e) {
      EXPECT_DOUBLE_EQ(cut_epochs[e]["train_loss"].get<double>(),
                       full_epochs[e]["train_loss"].get<double>())
          << "epoch " << e + 1;
      EXPECT_DOUBLE_EQ(cut_epochs[e]["train_accuracy"].get<double>(),
                       full_epochs[e]["train_accuracy"].get<double>())
          << "epoch " << e + 1;
    }
  }
}

// SIGTERM / SIGINT (stop_request.h): the run checkpoints after the step it is in and returns the
// signal, without summary.json; --resume then finishes it as if nothing had happened.
TEST_F(TrainerTest, AStopRequestCheckpointsAndTheResumeEqualsTheUninterruptedRun) {
  Config config = small_config();
  config.train.epochs = 2;
  train(config, dir("full"));
  set_stop_request_for_test(SIGTERM);
  const RunSummary stopped = train(config, dir("stopped"));
  set_stop_request_for_test(0);
  EXPECT_EQ(stopped.stopped_by_signal, SIGTERM);
  EXPECT_EQ(stopped.steps, 1);  // it stops after the step in flight
  EXPECT_FALSE(fs::exists(dir("stopped") + "/summary.json"));
  EXPECT_TRUE(fs::exists(dir("stopped") + "/checkpoints/epoch-0-step-1.ckpt"));
  const RunSummary resumed = train(config, dir("stopped"), /*resume=*/true);
  EXPECT_EQ(resumed.stopped_by_signal, 0);
  EXPECT_EQ(final_params(dir("stopped"), 2), final_params(dir("full"), 2));
  EXPECT_EQ(losses(dir("stopped")), losses(dir("full")));
}

// Tier 1 (memory_checkpoint.h): a run that fails inside an epoch resumes from its memory
// checkpoint of the step before (checkpoints/ holds only the epoch before) and ends bitwise equal
// to the uninterrupted run; a finished run leaves nothing in the memory folder.
TEST_F(TrainerTest, AFailedRunResumesFromItsMemoryCheckpointBitwise) {
  Config config = small_config();
  config.train.epochs = 2;
  config.train.memory_checkpoint_every_steps = 1;
  config.train.memory_checkpoint_folder = dir("shm");
  fs::create_directories(dir("shm"));
  train(config, dir("full"));
  EXPECT_TRUE(fs::is_empty(dir("shm")));
  Config failing = config;
  failing.parallel.inject_fault = "rank=0,step=13";
  EXPECT_THROW(train(failing, dir("failed")), Error);
  const auto newest = MemoryCheckpoint(dir("failed"), dir("shm")).newest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(newest->checkpoint.global_step, 12);
  EXPECT_FALSE(fs::exists(dir("failed") + "/checkpoints/epoch-1-step-12.ckpt"));
  const RunSummary resumed = train(config, dir("failed"), /*resume=*/true);
  EXPECT_EQ(resumed.steps, 20);
  EXPECT_EQ(final_params(dir("failed"), 2), final_params(dir("full"), 2));
  EXPECT_EQ(losses(dir("failed")), losses(dir("full")));
  EXPECT_TRUE(fs::is_empty(dir("shm")));
}

// A memory file an earlier run of the same folder left behind (killed before it could delete it)
// is deleted by a fresh run before its first save, so a failure of the new run never resumes
// from the old run's state.
TEST_F(TrainerTest, AFreshRunNeverResumesFromAnEarlierRunsMemoryFile) {
  Config config = small_config();
  config.train.epochs = 2;
  config.train.memory_checkpoint_every_steps = 1;
  config.train.memory_checkpoint_folder = dir("shm");
  fs::create_directories(dir("shm"));
  fs::create_directories(dir("run"));
  {
    Checkpoint stale;
    stale.sampler_epoch = 1;
    stale.sampler_position = 64;
    stale.global_step = 15;
    stale.seed = 5;
    MemoryCheckpoint(dir("run"), dir("shm")).save(stale);
  }
  Config failing = config;
  failing.parallel.inject_fault = "rank=0,step=1";  // before its first save
  EXPECT_THROW(train(failing, dir("run")), Error);
  EXPECT_FALSE(MemoryCheckpoint(dir("run"), dir("shm")).newest().has_value());
  train(config, dir("run"), /*resume=*/true);
  train(config, dir("full"));
  EXPECT_EQ(final_params(dir("run"), 2), final_params(dir("full"), 2));
}

// In-process restarts (launch.cc): a rank thread that fails every 7 steps (2 ranks, memory
// checkpoints every step) is restarted inside the process from the memory checkpoint each time;
// the run ends bitwise equal to the uninterrupted one, with one line per restart in
// restarts.jsonl. Without restarts left, the failure ends the run.
TEST_F(TrainerTest, InProcessRestartsResumeFromTheMemoryCheckpointBitwise) {
  Config config = small_config();
  config.train.epochs = 2;
  config.parallel.workers = 2;
  config.train.memory_checkpoint_every_steps = 1;
  config.train.memory_checkpoint_folder = dir("shm");
  fs::create_directories(dir("shm"));
  const TrainerOptions quiet{"", false, /*quiet=*/true, stderr, nullptr, nullptr};
  TrainerOptions options = quiet;
  options.run_dir = dir("full");
  run_training(config, options);
  Config failing = config;
  failing.parallel.inject_fault = "rank=1,every=7";
  failing.train.in_process_restarts = 5;
  options.run_dir = dir("failing");
  const RunSummary summary = run_training(failing, options);
  EXPECT_EQ(summary.steps, 20);
  EXPECT_EQ(final_params(dir("failing"), 2), final_params(dir("full"), 2));
  EXPECT_EQ(losses(dir("failing")), losses(dir("full")));
  std::ifstream log(dir("failing") + "/restarts.jsonl");
  std::vector<nlohmann::json> restarts;
  for (std::string line; std::getline(log, line);) restarts.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(restarts.size(), 2u);  // after steps 7 and 14
  EXPECT_TRUE(restarts[0]["in_process"].get<bool>());
  EXPECT_THAT(restarts[0]["cause"].get<std::string>(), HasSubstr("injected fault after step 7"));
  EXPECT_TRUE(fs::is_empty(dir("shm")));
  failing.train.in_process_restarts = 0;
  options.run_dir = dir("unrestarted");
  EXPECT_THROW(run_training(failing, options), Error);
}

// A run stopped after its last checkpoint but before summary.json (killed under the supervisor):
// --resume writes the summary from the checkpoint and trains nothing.
TEST_F(TrainerTest, ResumeAfterTheLastCheckpointWritesTheMissingSummary) {
  Config config = small_config();
  config.train.epochs = 2;
  const RunSummary full = train(config, dir("run"));
  fs::remove(dir("run") + "/summary.json");
  const RunSummary again = train(config, dir("run"), /*resume=*/true);
  EXPECT_TRUE(fs::exists(dir("run") + "/summary.json"));
  EXPECT_EQ(again.steps, full.steps);
  EXPECT_EQ(again.samples, full.samples);
  EXPECT_DOUBLE_EQ(again.final_test_accuracy, full.final_test_accuracy);
  EXPECT_DOUBLE_EQ(again.final_train_loss, full.final_train_loss);
  EXPECT_EQ(losses(dir("run")).size(), 20u);  // no step trained twice
  // With summary.json present, there is nothing to do: the error says how to train further.
  EXPECT_THROW(train(config, dir("run"), /*resume=*/true), ConfigError);
}

// A stopped run resumed with fewer epochs than it has done: its checkpoint is past the end as
// configured, so the resume is refused in one line before anything is rewritten (it used to write
// a summary of fewer epochs and rewrite resolved.toml); exactly the end is not past it.
TEST_F(TrainerTest, ResumePastTheConfiguredEpochsIsRefusedAndChangesNothing) {
  Config config = small_config();
  config.train.epochs = 3;
  config.train.checkpoint_every_steps = 13;  // step 13: inside epoch 2
  train(config, dir("run"));
  // As a run stopped inside epoch 2: its newest checkpoint is epoch-1-step-13.ckpt.
  for (const char* file : {"summary.json", "checkpoints/epoch-2.ckpt", "checkpoints/epoch-3.ckpt",
                           "checkpoints/epoch-2-step-26.ckpt", "checkpoints/latest"}) {
    fs::remove(dir("run") + "/" + file);
  }
  const std::string resolved = read_whole_file(dir("run") + "/resolved.toml");
  const std::string metrics = read_whole_file(dir("run") + "/metrics.jsonl");
  Config fewer = config;
  fewer.train.epochs = 1;
  try {
    train(fewer, dir("run"), /*resume=*/true);
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("epoch-1-step-13.ckpt is past --epochs 1 (1 epoch done, then "
                                    "step 13 inside epoch 2); give --epochs 2 or more to continue "
                                    "it"));
  }
  EXPECT_FALSE(fs::exists(dir("run") + "/summary.json"));
  EXPECT_EQ(read_whole_file(dir("run") + "/resolved.toml"), resolved);
  EXPECT_EQ(read_whole_file(dir("run") + "/metrics.jsonl"), metrics);
  // --epochs 2 finishes epoch 2 from the checkpoint; then, with a whole epoch done past --epochs
  // 1, the same refusal names --epochs 3.
  Config two = config;
  two.train.epochs = 2;
  EXPECT_EQ(train(two, dir("run"), /*resume=*/true).steps, 20);
  fs::remove(dir("run") + "/summary.json");
  EXPECT_THAT([&] { train(fewer, dir("run"), /*resume=*/true); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr(
                  "epoch-2.ckpt is past --epochs 1 (2 epochs done); give --epochs 3 or more")));
}

// A run stopped before its first checkpoint: --resume trains it from the beginning (instead of
// refusing, while a fresh run into the folder is refused because it holds metrics.jsonl).
TEST_F(TrainerTest, ResumeWithoutACheckpointStartsTheRunOver) {
  Config config = small_config();
  config.train.epochs = 2;
  train(config, dir("full"));
  fs::create_directories(dir("early"));
  std::ofstream(dir("early") + "/metrics.jsonl") << R"({"kind":"step","epoch":1,"step":1})"
                                                 << "\n";
  const RunSummary summary = train(config, dir("early"), /*resume=*/true);
  EXPECT_EQ(summary.resumed_from_epoch, 0);
  EXPECT_EQ(final_params(dir("early"), 2), final_params(dir("full"), 2));
  EXPECT_EQ(losses(dir("early")), losses(dir("full")));  // the stale record is gone
}

// A step checkpoint that falls on an epoch's last step is written there (as the epoch's).
TEST_F(TrainerTest, StepCheckpointsOnAnEpochsLastStepAreWritten) {
  Config config = small_config();
  config.train.epochs = 3;
  config.train.checkpoint_every = 0;         // epoch checkpoints: only the last
  config.train.checkpoint_every_steps = 10;  // = the steps of an epoch
  train(config, dir("run"));
  EXPECT_TRUE(fs::exists(dir("run") + "/checkpoints/epoch-1.ckpt"));
  EXPECT_TRUE(fs::exists(dir("run") + "/checkpoints/epoch-2.ckpt"));
  EXPECT_TRUE(fs::exists(dir("run") + "/checkpoints/epoch-3.ckpt"));
}

// Young/Daly: with mtbf_hours set and no fixed interval, checkpoints come every
// sqrt(2 C MTBF) seconds; a tiny MTBF makes that shorter than a step, so every step checkpoints.
TEST_F(TrainerTest, YoungDalyIntervalCheckpointsInsideEpochs) {
  Config config = small_config();
  config.train.epochs = 1;
  config.train.mtbf_hours = 1e-12;
  train(config, dir("run"));
  int inside = 0;
  for (const auto& entry : fs::directory_iterator(dir("run") + "/checkpoints")) {
    inside += entry.path().filename().string().find("-step-") != std::string::npos ? 1 : 0;
  }
  EXPECT_GE(inside, 5);  // steps 1 .. 9 of 10 (writes in flight may merge a few)
}

TEST_F(TrainerTest, MseLossAndEvaluationInBatches) {
  Config config = small_config();
  config.train.loss = "mse";
  config.train.epochs = 3;
  config.optim.lr = 0.2;
  config.data.synthetic_noise = 0.5;
  config.data.synthetic_test_samples = 2500;  // evaluated in 3 batches of up to 1000
  config.train.eval_every_steps = 5;
  const RunSummary summary = train(config, dir("mse"));
  EXPECT_GT(summary.final_test_accuracy, 0.8);
  // eval records every 5 steps except at epoch ends (10, 20, 30), where the epoch record has it.
  EXPECT_EQ(records(dir("mse"), "eval").size(), 3u);
}

TEST(ScheduleConfig, ConvertsEpochsToSteps) {
  Config config;
  config.train.epochs = 10;
  config.train.batch_size = 256;
  config.optim.lr = 0.2;
  config.data.synthetic_noise = 0.5;
  config.schedule.decay = "cosine";
  config.schedule.warmup = "gradual";
  config.schedule.warmup_epochs = 2;
  const auto s = schedule_config(config, /*steps_per_epoch=*/100);
  EXPECT_EQ(s.warmup_steps, 200);
  EXPECT_EQ(s.total_steps, 800);  // 1000 steps in all, the cosine phase after warmup
  EXPECT_EQ(s.global_batch, 256);
  EXPECT_DOUBLE_EQ(s.base_lr, 0.2);
  config.schedule.warmup_epochs = 0;
  config.schedule.warmup_steps = 30;
  EXPECT_EQ(schedule_config(config, 100).warmup_steps, 30);
  EXPECT_EQ(schedule_config(config, 100).total_steps, 970);
}

}  // namespace
}  // namespace dtrain::train
