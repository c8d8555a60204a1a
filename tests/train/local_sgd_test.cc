// Local SGD (parallel.strategy = "local_sgd"): with H = 1 it follows synchronous data parallelism,
// its averaging traffic falls by H and matches 2 (P-1)/P x 4N per average, the replicas agree at
// every epoch end, a resumed run continues bitwise, and its config keys are checked.
#include "dtrain/train/strategies/local_sgd/local_sgd.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/config.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class LocalSgdTest : public testing::ParallelTrainingTest {
 protected:
  static Config local_sgd_config(std::int64_t period) {
    Config c = mlp_config();
    c.train.epochs = 2;
    c.parallel.strategy = "local_sgd";
    c.local_sgd.period = period;
    return c;
  }

  static nlohmann::json summary_of(const std::string& run_dir) {
    std::ifstream in(fs::path(run_dir) / "summary.json");
    return nlohmann::json::parse(in);
  }

  static float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
    }
    return worst;
  }
};

// H = 1 with SGD + momentum (linear in the gradient): the mean of the replicas' updates is the
// synchronous update, so the parameters follow allreduce training to rounding.
TEST_F(LocalSgdTest, PeriodOneFollowsSynchronousDataParallelism) {
  for (const int ranks : {2, 3, 4}) {
    for (const bool nesterov : {false, true}) {
      Config sync = mlp_config();
      sync.train.epochs = 2;
      sync.optim.nesterov = nesterov;
      sync.optim.weight_decay = 1e-3;
      Config local = local_sgd_config(1);
      local.optim = sync.optim;
      const std::vector<float> expected = allreduce_training(sync, ranks);
      const std::vector<float> actual = allreduce_training(local, ranks);
      EXPECT_LT(max_abs_difference(actual, expected), 1e-5f)
          << ranks << " ranks, nesterov " << nesterov;
    }
  }
}

// Uneven shares (a global batch of 25 over 2 ranks: 12 and 13): each replica's gradient is
// weighted by P x share / B, so H = 1 is still the synchronous update.
TEST_F(LocalSgdTest, PeriodOneFollowsSynchronousTrainingWithUnevenShares) {
  Config sync = mlp_config();
  sync.train.batch_size = 25;
  Config local = local_sgd_config(1);
  local.train = sync.train;
  EXPECT_LT(max_abs_difference(allreduce_training(local, 2), allreduce_training(sync, 2)), 1e-5f);
}

TEST_F(LocalSgdTest, LongerPeriodsTrainADifferentTrajectory) {
  const std::vector<float> one = allreduce_training(local_sgd_config(1), 2);
  const std::vector<float> four = allreduce_training(local_sgd_config(4), 2);
  EXPECT_GT(relative_difference(four, one), 1e-4);
}

// Bytes sent per step fall by H, and the averages' bytes are the ring allreduce's 2 (P-1)/P x 4N
// each. 10 steps per epoch: H = 5 averages twice an epoch, H = 1 ten times.
TEST_F(LocalSgdTest, BytesPerStepFallByThePeriodAndMatchTheFormula) {
  for (const int ranks : {2, 3}) {
    std::vector<double> averaging;
    std::vector<double> total;
    for (const std::int64_t period : {1, 5}) {
      Config config = local_sgd_config(period);
      config.model.hidden = {64, 64};
      config.parallel.check_headers = false;  // the header round trips are not the formula's
      const std::string run_dir = dir(fmt::format("h{}", period));
      allreduce_training(config, ranks, run_dir);
      const nlohmann::json parallel = summary_of(run_dir)["parallel"];
      EXPECT_EQ(parallel["strategy"], "local_sgd");
      EXPECT_EQ(parallel["averages"].get<std::int64_t>(), 2 * 10 / period);
      const double measured = parallel["averaging_bytes_sent_per_rank_and_step"].get<double>();
      const double predicted =
          parallel["averaging_bytes_sent_per_rank_and_step_predicted"].get<double>();
      EXPECT_NEAR(measured / predicted, 1.0, 1e-3) << ranks << " ranks, period " << period;
      averaging.push_back(measured);
      total.push_back(parallel["bytes_sent_per_rank_and_step"].get<double>());
    }
    EXPECT_NEAR(averaging[0] / averaging[1], 5.0, 1e-9) << ranks << " ranks";
    // Everything else (evaluation, epoch sums, the final checkpoint's gather) is a small fixed
    // part.
    EXPECT_GT(total[0] / total[1], 3.5) << ranks << " ranks";
    EXPECT_LT(total[0] / total[1], 5.0) << ranks << " ranks";
  }
  const std::int64_t params = 16 * 64 + 64 + 64 * 64 + 64 + 64 * 4 + 4;
  EXPECT_DOUBLE_EQ(LocalSgd::average_bytes(params, 2), 4.0 * params);
  EXPECT_DOUBLE_EQ(LocalSgd::average_bytes(params, 4), 6.0 * params);
}

// 10 steps per epoch with H = 4: averages after steps 4 and 8, then the epoch's last step averages
// what is left, so every rank holds the same parameters at the end (allreduce_training checks).
TEST_F(LocalSgdTest, ReplicasAgreeAfterEveryEpoch) {
  for (const int ranks : {2, 3}) allreduce_training(local_sgd_config(4), ranks);
}

TEST_F(LocalSgdTest, SynchronousStepsFirstEqualPeriodOneForThoseSteps) {
  // All 20 steps synchronous: the same as H = 1.
  Config warm = local_sgd_config(4);
  warm.local_sgd.synchronous_steps = 20;
  EXPECT_EQ(allreduce_training(warm, 2), allreduce_training(local_sgd_config(1), 2));
}

// Each rank's momentum is its own; the checkpoint keeps every rank's, so a resumed run continues
// exactly as the uninterrupted one.
TEST_F(LocalSgdTest, ResumeContinuesBitwise) {
  Config config = local_sgd_config(3);
  config.train.checkpoint_every = 1;
  const std::vector<float> uninterrupted = allreduce_training(config, 2);
  const std::string run_dir = dir("resume");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 2, run_dir);
  const std::vector<float> resumed = allreduce_training(config, 2, run_dir, /*resume=*/true);
  EXPECT_EQ(resumed, uninterrupted);
}

// Checkpoints on a clock wait for the next average (the replicas equal, no local steps pending):
// with period 4, a checkpoint due every 3 steps is taken after steps 4 and 8 (and the epoch's end),
// never 3 or 6; the checkpoints do not change the training, and a resume from one inside an epoch
// continues bitwise.
TEST_F(LocalSgdTest, CheckpointsInsideEpochsWaitForTheNextAverageAndResumeBitwise) {
  Config config = local_sgd_config(4);
  config.train.checkpoint_every_steps = 3;
  config.train.keep_checkpoints = 0;  // every one
  const std::string full = dir("full");
  const std::vector<float> uninterrupted = allreduce_training(config, 2, full);
  EXPECT_EQ(uninterrupted, allreduce_training(local_sgd_config(4), 2));
  const fs::path checkpoints = fs::path(full) / "checkpoints";
  EXPECT_TRUE(fs::exists(checkpoints / "epoch-0-step-4.ckpt"));
  EXPECT_TRUE(fs::exists(checkpoints / "epoch-0-step-8.ckpt"));
  EXPECT_TRUE(fs::exists(checkpoints / "epoch-1-step-14.ckpt"));
  EXPECT_FALSE(fs::exists(checkpoints / "epoch-0-step-3.ckpt"));
  EXPECT_FALSE(fs::exists(checkpoints / "epoch-0-step-6.ckpt"));
  for (const char* cut : {"epoch-0-step-8.ckpt", "epoch-1-step-14.ckpt"}) {
    SCOPED_TRACE(cut);
    const std::string run = dir(fmt::format("cut-{}", cut));
    fs::copy(full, run, fs::copy_options::recursive);
    const std::int64_t cut_step = read_checkpoint((checkpoints / cut).string()).global_step;
    for (const auto& entry : fs::directory_iterator(fs::path(run) / "checkpoints")) {
      if (entry.path().filename() != "latest" &&
          read_checkpoint(entry.path().string()).global_step > cut_step) {
        fs::remove(entry.path());
      }
    }
    write_file_atomically((fs::path(run) / "checkpoints" / "latest").string(),
                          std::string(cut) + "\n");
    fs::remove(fs::path(run) / "summary.json");
    EXPECT_EQ(allreduce_training(config, 2, run, /*resume=*/true), uninterrupted);
  }
}

// An evaluation in the middle of an epoch (which averages the replicas to evaluate them) gives
// every rank its own replica back: the training is the same as without it, bit for bit, and every
// evaluation is recorded. (That the average is what gets evaluated is not checked here.)
TEST_F(LocalSgdTest, MidEpochEvaluationDoesNotChangeTheTraining) {
  const Config plain = local_sgd_config(4);
  Config evaluated = plain;
  evaluated.train.eval_every_steps = 3;  // after steps 3, 6, 9: between averages
  const std::string run_dir = dir("evaluated");
  EXPECT_EQ(allreduce_training(evaluated, 2, run_dir), allreduce_training(plain, 2));
  std::ifstream metrics(fs::path(run_dir) / "metrics.jsonl");
  int evals = 0;
  for (std::string line; std::getline(metrics, line);) {
    if (nlohmann::json::parse(line).value("kind", "") == "eval") ++evals;
  }
  EXPECT_EQ(evals, 6);  // 3 per epoch of 10 steps
}

// Each rank's momentum is its own: a checkpoint of 2 ranks does not resume on 3.
TEST_F(LocalSgdTest, ResumeOnAnotherNumberOfRanksIsRefused) {
  Config config = local_sgd_config(3);
  config.train.epochs = 1;
  const std::string run_dir = dir("two");
  allreduce_training(config, 2, run_dir);
  config.train.epochs = 2;
  EXPECT_THAT([&] { allreduce_training(config, 3, run_dir, /*resume=*/true); },
              ::testing::ThrowsMessage<Error>(HasSubstr("local SGD optimizer state of 2 ranks")));
}

TEST_F(LocalSgdTest, ConfigKeysAreCheckedAndNamed) {
  EXPECT_THAT([] { parse_config("[local_sgd]\nperiod = 0\n", "test.toml"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("local_sgd.period")));
  EXPECT_THAT(
      [] {
        parse_config("[parallel]\nstrategy = \"local_sgd\"\nsync_batch_norm = true\n", "test.toml");
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("parallel.sync_batch_norm")));
  Config config;
  config.local_sgd.period = 8;
  const std::vector<std::string> ignored = ignored_settings(config);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_THAT(ignored[0], HasSubstr("[local_sgd]"));
  config.parallel.strategy = "local_sgd";
  EXPECT_TRUE(ignored_settings(config).empty());
  EXPECT_EQ(parse_config(to_toml(config), "resolved.toml"), config);
}

}  // namespace
}  // namespace dtrain::train
