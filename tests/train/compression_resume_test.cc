// Compressed data parallelism resumes bitwise (docs/COMPRESSION.md, "Checkpoints"): the
// checkpoint holds every rank's error-feedback residual, each bucket's exchange count (the codecs'
// seeds and the warm-up's end) and PowerSGD's Q, so 1 epoch + a resume on as many ranks gives the
// uninterrupted run's parameters bit for bit; on another number of ranks they restart at zero and
// the run goes on.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/train/config.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class CompressionResumeTest : public testing::ParallelTrainingTest {
 protected:
  static Config compressed(const std::string& codec, std::int64_t warmup = 0) {
    Config c = mlp_config();
    c.train.epochs = 2;
    c.train.checkpoint_every = 1;
    c.train.checkpoint_every_steps = 4;  // checkpoints inside the epoch too
    c.data_parallel.zero_stage = std::string("0");
    c.data_parallel.compression = codec;
    c.data_parallel.compression_warmup_steps = warmup;
    return c;
  }
};

TEST_F(CompressionResumeTest, ResumeOnAsManyRanksEqualsTheUninterruptedRun) {
  // topk, randomk: error feedback and (randomk) seeded indices; qsgd: seeded dithering without
  // error feedback; powersgd: residual and Q's warm start; a warm-up that ends after the resume.
  for (const auto& [codec, warmup] : std::vector<std::pair<std::string, std::int64_t>>{
           {"topk:0.1", 0}, {"randomk:0.2", 0}, {"qsgd:4", 0}, {"powersgd:1", 0}, {"sign", 12}}) {
    SCOPED_TRACE(fmt::format("{} warm-up {}", codec, warmup));
    const Config config = compressed(codec, warmup);
    const std::vector<float> uninterrupted = allreduce_training(config, 2);
    const std::string run = dir("resume");
    Config first = config;
    first.train.epochs = 1;
    allreduce_training(first, 2, run);
    EXPECT_EQ(allreduce_training(config, 2, run, /*resume=*/true), uninterrupted);
  }
}

// PowerSGD with momentum correction: each rank's velocity (masked in the subspace sent) is in the
// checkpoint beside the residual and Q, so the resume is bitwise too.
TEST_F(CompressionResumeTest, PowerSgdMomentumCorrectionResumesBitwise) {
  Config config = compressed("powersgd:1");
  config.optim.momentum = 0.0;
  config.data_parallel.momentum_correction = 0.9;
  const std::vector<float> uninterrupted = allreduce_training(config, 2);
  const std::string run = dir("powersgd_momentum");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 2, run);
  EXPECT_EQ(allreduce_training(config, 2, run, /*resume=*/true), uninterrupted);
}

// Robust aggregation with worker momentum (robust_reducer.h): each rank's momentum is in the
// checkpoint as a residual is, so the resume on as many ranks is bitwise too.
TEST_F(CompressionResumeTest, WorkerMomentumResumesBitwise) {
  Config config = mlp_config();
  config.train.epochs = 2;
  config.train.checkpoint_every = 1;
  config.optim.momentum = 0.0;
  config.data_parallel.aggregator = "median";
  config.data_parallel.worker_momentum = 0.9;
  const std::vector<float> uninterrupted = allreduce_training(config, 3);
  const std::string run = dir("momentum");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 3, run);
  EXPECT_EQ(allreduce_training(config, 3, run, /*resume=*/true), uninterrupted);
}

// Centered clipping's centre and bucketing's shuffle count are in the checkpoint: the resumed run
// continues bit for bit (they used to restart, and the run drifted from the uninterrupted one).
TEST_F(CompressionResumeTest, CenteredClippingAndBucketingResumeBitwise) {
  Config config = mlp_config();
  config.train.epochs = 2;
  config.train.checkpoint_every = 1;
  config.data_parallel.aggregator = "bucket:2,cclip:1";
  const std::vector<float> uninterrupted = allreduce_training(config, 3);
  const std::string run = dir("cclip");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 3, run);
  EXPECT_EQ(allreduce_training(config, 3, run, /*resume=*/true), uninterrupted);
}

// A residual is its rank's own: on 3 ranks a checkpoint of 2 restarts them at zero and trains on.
TEST_F(CompressionResumeTest, AnotherNumberOfRanksRestartsTheResidualsAtZero) {
  Config config = compressed("topk:0.1");
  const std::string run = dir("reshard");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 2, run);
  const std::vector<float> resumed = allreduce_training(config, 3, run, /*resume=*/true);
  for (const float p : resumed) ASSERT_TRUE(std::isfinite(p));
  // Not the 3-rank run's own trajectory (its first epoch differs), but close to it: the
  // same data and schedule.
  EXPECT_LT(relative_difference(resumed, allreduce_training(config, 3)), 0.5);
}

}  // namespace
}  // namespace dtrain::train
