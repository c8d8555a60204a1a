// Synchronous data parallelism through the Trainer: P ranks sharing a global batch follow the
// trajectory of one worker with that batch (seeds 001/002), for every allreduce algorithm, P = 2,
// 3, 4, with synchronized batch norm, with fusion and overlap on or off, with gradient
// accumulation; the same run twice is bitwise identical; ranks that disagree are named.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DataParallelTest : public testing::ParallelTrainingTest {
 protected:
  static Config resnet_config() {
    Config c = mlp_config();
    c.data.synthetic_shape = {1, 6, 6};
    c.model.name = "resnet";
    c.model.resnet_width = 4;
    c.model.resnet_blocks = 1;
    c.data_parallel.sync_batch_norm = true;
    return c;
  }

  // Parameters after one worker trains `config`.
  std::vector<float> single(Config config) {
    config.parallel.workers = 1;
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }
};

TEST_F(DataParallelTest, EveryAlgorithmFollowsTheSingleWorkerTrajectory) {
  const Config config = mlp_config();
  const std::vector<float> reference = single(config);
  for (int ranks : {2, 3, 4}) {
    for (const auto& algorithm : comm::allreduce_algorithms()) {
      if (algorithm.name == "native") continue;  // inproc has no allreduce of its own
      Config c = config;
      c.parallel.allreduce = std::string(algorithm.name);
      const double diff = relative_difference(allreduce_training(c, ranks), reference);
      EXPECT_LT(diff, 1e-5) << ranks << " ranks, " << algorithm.name;
    }
  }
}

TEST_F(DataParallelTest, SynchronizedBatchNormFollowsTheSingleWorkerTrajectory) {
  const Config config = resnet_config();
  const std::vector<float> reference = single(config);
  for (int ranks : {2, 3, 4}) {
    EXPECT_LT(relative_difference(allreduce_training(config, ranks), reference), 1e-5)
        << ranks << " ranks";
  }
}

TEST_F(DataParallelTest, PerRankBatchNormDiffersFromTheGlobalBatch) {
  // Without synchronization each rank normalises with its own shard's statistics: a different
  // computation, which is why synchronized batch norm exists (the test shows the switch matters).
  Config config = resnet_config();
  const std::vector<float> reference = single(config);
  config.data_parallel.sync_batch_norm = false;
  EXPECT_GT(relative_difference(allreduce_training(config, 2), reference), 1e-4);
}

TEST_F(DataParallelTest, FusionOverlapAndAccumulationGiveTheSameNumbers) {
  const Config config = mlp_config();
  const std::vector<float> reference = allreduce_training(config, 3);
  for (std::int64_t fusion : {std::int64_t{0}, std::int64_t{256}, std::int64_t{1} << 24}) {
    for (const char* overlap : {"true", "false"}) {
      Config c = config;
      c.data_parallel.bucket_bytes = std::to_string(fusion);
      c.data_parallel.overlap = overlap;
      EXPECT_LT(relative_difference(allreduce_training(c, 3), reference), 1e-5)
          << "fusion " << fusion << " overlap " << overlap;
    }
  }
  Config unchecked = config;
  unchecked.parallel.check_headers = false;
  EXPECT_EQ(allreduce_training(unchecked, 3), reference) << "without the per-bucket header check";
  Config accumulate = config;
  accumulate.train.accumulate_steps = 2;
  EXPECT_LT(relative_difference(allreduce_training(accumulate, 3), reference), 1e-5)
      << "accumulate 2";
  EXPECT_LT(relative_difference(single(accumulate), single(config)), 1e-5) << "accumulate 1 rank";
}

TEST_F(DataParallelTest, OverlapOnOrOffIsBitwiseEqual) {
  Config config = mlp_config();
  config.data_parallel.bucket_bytes = std::to_string(256);
  config.data_parallel.overlap = "true";
  const std::vector<float> with = allreduce_training(config, 2);
  config.data_parallel.overlap = "false";
  EXPECT_EQ(allreduce_training(config, 2), with);
}

TEST_F(DataParallelTest, SameRunTwiceIsBitwiseIdentical) {
  Config config = mlp_config();
  config.model.dropout = 0.2;  // the per-rank random streams too
  EXPECT_EQ(allreduce_training(config, 3), allreduce_training(config, 3));
}

TEST_F(DataParallelTest, UnevenLastBatchIsSharedOrSkippedWithoutHanging) {
  // 250 samples, batch 24: 10 full steps and a last batch of 10, shared 4/3/3 by three ranks
  // (trained on), and by four ranks 3/3/2/2 (trained on); 4 ranks x 3 micro-batches need 12, so
  // with accumulation it is skipped by all ranks alike.
  Config config = mlp_config();
  config.data.synthetic_samples = 250;
  const std::vector<float> reference = single(config);
  EXPECT_LT(relative_difference(allreduce_training(config, 3), reference), 1e-5);
  EXPECT_LT(relative_difference(allreduce_training(config, 4), reference), 1e-5);
  config.train.accumulate_steps = 3;
  const std::string run_dir = dir("skip");
  config.parallel.workers = 4;
  const RunSummary summary =
      run_training(config, TrainerOptions{run_dir, false, true, stderr, nullptr, nullptr});
  EXPECT_EQ(summary.steps, 10);
  EXPECT_EQ(summary.samples, 240);
}

TEST_F(DataParallelTest, WritesPerRankFiguresAndATrace) {
  Config config = mlp_config();
  config.parallel.workers = 2;
  config.parallel.trace_steps = 3;
  const std::string run_dir = dir("figures");
  const RunSummary summary =
      run_training(config, TrainerOptions{run_dir, false, true, stderr, nullptr, nullptr});
  ASSERT_FALSE(summary.parallel.is_null());
  EXPECT_EQ(summary.parallel["ranks"], 2);
  ASSERT_EQ(summary.parallel["per_rank"].size(), 2u);
  for (const auto& row : summary.parallel["per_rank"]) {
    EXPECT_EQ(row["samples"].get<double>(), 120.0);
    EXPECT_GT(row["bytes_sent"].get<double>(), 0.0);
    EXPECT_GE(row["compute_seconds"].get<double>(), 0.0);
  }
  const auto trace = nlohmann::json::parse(std::ifstream(fs::path(run_dir) / "trace.json"));
  int forwards = 0, allreduces = 0;
  std::set<int> pids;
  for (const auto& event : trace["traceEvents"]) {
    if (event["ph"] != "X") continue;
    pids.insert(event["pid"].get<int>());
    if (event["name"] == "forward") ++forwards;
    if (event["cat"] == "comm") ++allreduces;
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
  EXPECT_EQ(forwards, 2 * 3);  // two ranks, three traced steps
  EXPECT_GE(allreduces, 2 * 3);
  // The epoch record carries the per-rank rows too.
  std::ifstream metrics(fs::path(run_dir) / "metrics.jsonl");
  std::string line, last_epoch;
  while (std::getline(metrics, line)) {
    if (line.find("\"epoch\"") != std::string::npos &&
        line.find("\"ranks\"") != std::string::npos) {
      last_epoch = line;
    }
  }
  EXPECT_FALSE(last_epoch.empty());
}

// ZeRO-1: reduce-scatter + update of 1/P + allgather is a ring allreduce's arithmetic followed by
// an element-wise update: the replicated ring run's numbers to rounding (the sum's grouping and
// the update loop's vector/scalar split depend on the block borders), the single worker's
// trajectory like every algorithm, and bitwise the same with overlap on or off and with the
// gradient sums fused into the update or not.
TEST_F(DataParallelTest, ShardedOptimizerFollowsTheRingAllreduceRun) {
  for (const char* optimizer : {"sgd", "adam"}) {
    Config config = mlp_config();
    config.optim.name = optimizer;
    if (config.optim.name == "adam") {
      config.optim.momentum = 0.0;
      config.optim.lr = 0.01;
    }
    const std::vector<float> reference = single(config);
    for (int ranks : {2, 3, 4}) {
      Config replicated = config;
      replicated.parallel.allreduce = "ring";
      replicated.data_parallel.zero_stage = std::string("0");
      const std::vector<float> ring = allreduce_training(replicated, ranks);
      for (std::int64_t fusion : {std::int64_t{0}, std::int64_t{256}, std::int64_t{1} << 20}) {
        Config c = config;
        c.data_parallel.zero_stage = std::string("1");
        c.data_parallel.bucket_bytes = std::to_string(fusion);
        c.data_parallel.overlap = "true";
        const std::vector<float> sharded = allreduce_training(c, ranks);
        const std::string what = fmt::format("{}, {} ranks, fusion {}", optimizer, ranks, fusion);
        EXPECT_LT(relative_difference(sharded, ring), 1e-6) << what;
        EXPECT_LT(relative_difference(sharded, reference), 1e-5) << what;
        // Without overlap, sgd sums the gradients inside the update (fused_update_policy.h),
        // in the ring's order; the reduce-scatter path must give the same bits.
        c.data_parallel.overlap = "false";
        EXPECT_EQ(allreduce_training(c, ranks), sharded) << what << ", overlap off";
        c.data_parallel.sum_in_update = "false";
        EXPECT_EQ(allreduce_training(c, ranks), sharded) << what << ", overlap off, not fused";
      }
    }
  }
}

// The checkpoint of a sharded run holds the whole optimizer state, the same bytes as a replicated
// run's, so either kind of run resumes the other and continues on the same trajectory.
TEST_F(DataParallelTest, ShardedOptimizerCheckpointsTheWholeStateAndResumesEitherWay) {
  Config config = mlp_config();
  config.train.epochs = 1;
  config.data_parallel.zero_stage = std::string("0");
  Config sharded = config;
  sharded.data_parallel.zero_stage = std::string("1");
  const std::string replicated_dir = dir("replicated");
  const std::string sharded_dir = dir("sharded");
  allreduce_training(config, 3, replicated_dir);
  allreduce_training(sharded, 3, sharded_dir);
  const Checkpoint a = read_checkpoint(replicated_dir + "/checkpoints/epoch-1.ckpt");
  const Checkpoint b = read_checkpoint(sharded_dir + "/checkpoints/epoch-1.ckpt");
  ASSERT_EQ(a.optimizer_state.size(), 1u);
  ASSERT_EQ(b.optimizer_state.size(), 1u);
  EXPECT_EQ(b.optimizer_state[0].name, a.optimizer_state[0].name);
  EXPECT_EQ(b.optimizer_state[0].values, a.optimizer_state[0].values);
  EXPECT_EQ(b.params, a.params);
  // Epoch 2 resumed crosswise: a sharded run from the replicated checkpoint and vice versa.
  config.train.epochs = 2;
  sharded.train.epochs = 2;
  const std::vector<float> sharded_from_replicated =
      allreduce_training(sharded, 3, replicated_dir, /*resume=*/true);
  const std::vector<float> replicated_from_sharded =
      allreduce_training(config, 3, sharded_dir, /*resume=*/true);
  EXPECT_EQ(sharded_from_replicated, replicated_from_sharded);
  EXPECT_EQ(sharded_from_replicated, allreduce_training(config, 3));
}

// Resume on another number of ranks (--workers or mpirun -np changed): the checkpoint holds one
// worker's layout, so P' ranks re-cut the ZeRO-1 shards of the optimizer state, keep the global
// batch, the sampler position and the schedule, and continue on the trajectory an uninterrupted
// P' run follows (equal up to the rounding of sums over another number of ranks).
TEST_F(DataParallelTest, ACheckpointOfPRanksResumesOnAnotherNumberOfRanks) {
  Config config = mlp_config();
  config.train.epochs = 1;
  config.train.checkpoint_every = 1;
  config.train.checkpoint_every_steps = 4;  // a checkpoint inside the epoch too
  for (const auto& [from, to] : {std::pair{2, 1}, std::pair{2, 3}, std::pair{4, 2}}) {
    SCOPED_TRACE(fmt::format("{} -> {} ranks", from, to));
    const std::string run = dir(fmt::format("reshard{}to{}", from, to));
    allreduce_training(config, from, run);
    Config longer = config;
    longer.train.epochs = 2;
    const std::vector<float> resumed =
        to == 1 ? std::vector<float>{} : allreduce_training(longer, to, run, true);
    std::vector<float> got = resumed;
    if (to == 1) {
      longer.parallel.workers = 1;
      Trainer trainer(longer, TrainerOptions{run, true, true, stderr, nullptr, nullptr});
      trainer.run();
      const auto& store = trainer.model().store();
      got.assign(store.params(), store.params() + store.num_params());
    }
    const std::vector<float> reference =
        to == 1 ? single(longer) : allreduce_training(longer, to, dir("reference"));
    EXPECT_LT(relative_difference(got, reference), 1e-6);
  }
}

// A strategy whose checkpoint holds per-rank state (local SGD's replicas) refuses another
// number of ranks, naming both counts and what to do.
TEST_F(DataParallelTest, PerRankStateRefusesAnotherNumberOfRanks) {
  Config config = mlp_config();
  config.parallel.strategy = "local_sgd";
  config.local_sgd.period = 2;
  config.train.checkpoint_every = 1;
  const std::string run = dir("local");
  allreduce_training(config, 2, run);
  config.train.epochs = 2;
  try {
    allreduce_training(config, 3, run, /*resume=*/true);
    ADD_FAILURE() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_THAT(e.what(), HasSubstr("this run has 3"));
    EXPECT_THAT(e.what(), HasSubstr("resume with 2 ranks"));
  }
}

TEST_F(DataParallelTest, RanksWithDifferentConfigsAreNamed) {
  Config config = mlp_config();
  config.parallel.workers = 2;
  const std::string run_dir = dir("mismatch");
  try {
    comm::spawn_ranks(2, [&](comm::Communicator& comm) {
      Config mine = config;
      if (comm.rank() == 1) mine.optim.lr = 0.07;
      TrainerOptions options{run_dir, false, true, stderr, nullptr, nullptr};
      options.comm = &comm;
      Trainer trainer(mine, options);
    });
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    // Whichever rank failed first: rank 1 names the line, rank 0 names rank 1.
    EXPECT_THAT(e.what(), HasSubstr("differs from rank 0"));
  }
}

}  // namespace
}  // namespace dtrain::train
