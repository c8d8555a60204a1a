// What the data-parallel and parameter-server training tests share: a temporary folder of run
// folders per test, a small MLP config that 2, 3 and 4 ranks divide evenly, allreduce training on
// ranks as threads, and the relative distance between two parameter vectors.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train::testing {

class ParallelTrainingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = std::filesystem::temp_directory_path() /
            fmt::format("dtrain_{}_{}_{}", info->test_suite_name(),
                        std::string(info->name()).substr(0, 40), ::getpid());
    std::filesystem::remove_all(root_);
    std::filesystem::create_directories(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // A fresh run folder under the test's folder.
  std::string dir(const std::string& name) {
    ++runs_;
    return (root_ / fmt::format("{}-{}", name, runs_)).string();
  }

  // 240 samples, global batch 24: 10 steps per epoch, divisible by 2, 3 and 4 ranks.
  static Config mlp_config() {
    Config c;
    c.data.dataset = "synthetic";
    c.data.synthetic_samples = 240;
    c.data.synthetic_test_samples = 60;
    c.data.synthetic_classes = 4;
    c.data.synthetic_shape = {1, 4, 4};
    c.data.synthetic_noise = 0.8;
    c.model.name = "mlp";
    c.model.hidden = {16, 8};
    c.train.epochs = 1;
    c.train.batch_size = 24;
    c.train.seed = 3;
    c.train.log_every = 5;
    c.train.checkpoint_every = 0;
    c.optim.lr = 0.05;
    c.optim.momentum = 0.9;
    c.parallel.trace_steps = 0;
    return c;
  }

  // A 2-block GPT of width `dim` with `heads` heads on a small generated text file, "line i of the
  // <corpus> corpus: ..." (64 windows of 8 bytes: 4 steps of 16 per epoch), 2 epochs, SGD 0.05 /
  // 0.9; the caller sets the seed, checkpoints and strategy.
  Config small_gpt_config(const std::string& corpus, std::int64_t heads, std::int64_t dim) const {
    const std::string path = (root_ / "corpus.txt").string();
    {
      std::ofstream out(path);
      for (int i = 0; i < 200; ++i) {
        out << fmt::format("line {} of the {} corpus: the quick brown fox {}.\n", i, corpus, i * 7);
      }
    }
    Config c;
    c.data.dataset = "text";
    c.data.path = path;
    c.data.block = 8;
    c.data.text_windows = 64;
    c.data.text_test_windows = 16;
    c.model.name = "gpt";
    c.model.gpt_layers = 2;
    c.model.gpt_heads = heads;
    c.model.gpt_dim = dim;
    c.train.epochs = 2;
    c.train.batch_size = 16;
    c.optim.lr = 0.05;
    c.optim.momentum = 0.9;
    c.parallel.trace_steps = 0;
    return c;
  }

  static comm::CommOptions comm_options() {
    comm::CommOptions options;
    options.timeout = std::chrono::seconds(20);
    return options;
  }

  // Rank 0's parameters (checked equal on every rank) after `ranks` workers train `config` with
  // its strategy (allreduce by default), as threads, in `run_dir` (a fresh folder when empty),
  // continuing its latest checkpoint when `resume`.
  std::vector<float> allreduce_training(Config config, int ranks, std::string run_dir = "",
                                        bool resume = false) {
    config.parallel.workers = ranks;
    if (run_dir.empty()) run_dir = dir("parallel");
    std::vector<std::vector<float>> params(static_cast<std::size_t>(ranks));
    comm::spawn_ranks(
        ranks,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions trainer_options{run_dir, resume, true, stderr, nullptr, nullptr};
          trainer_options.comm = &comm;
          Trainer trainer(config, trainer_options);
          trainer.run();
          const auto& store = trainer.model().store();
          params[static_cast<std::size_t>(comm.rank())].assign(store.params(),
                                                               store.params() + store.num_params());
        },
        comm_options());
    for (int r = 1; r < ranks; ++r) {
      EXPECT_EQ(params[static_cast<std::size_t>(r)], params[0]) << "rank " << r << " diverged";
    }
    return params[0];
  }

  // ||a - b|| / ||b||.
  static double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
      norm += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(diff / norm);
  }

  std::filesystem::path root_;
  int runs_ = 0;
};

}  // namespace dtrain::train::testing
