// The hybrid strategy (strategies/hybrid/) on 4 thread ranks: 2 replicas of a 2-stage pipeline and
// 2 replicas of a 2-way tensor split train the parameters of one worker on the same global batch
// (1e-5 relative); ZeRO-1 on the data axis gives the plain data axis's parameters; the bytes each
// rank sends per step equal the formula; a resumed grid equals the uninterrupted run, and its
// checkpoint (one worker's layout) resumes on another grid; bad grids are one-line errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class HybridTest : public testing::ParallelTrainingTest {
 public:
  // mlp_config's MLP (16, 8 hidden; 4 classes: every Linear splits in 2), on a dp x tp x pp grid.
  static Config grid(int dp, int tp, int pp) {
    Config c = mlp_config();
    c.parallel.strategy = "hybrid";
    c.hybrid.dp = dp;
    c.hybrid.tp = tp;
    c.hybrid.pp = pp;
    c.pipeline.micro_batches = 2;
    return c;
  }

  // One worker on the same global batch (no accumulation): what the grid should follow.
  std::vector<float> one_worker(Config config) {
    config.parallel.strategy = "data_parallel";
    config.hybrid = HybridSection{};
    config.pipeline = PipelineSection{};
    config.data_parallel = DataParallelSection{};
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  void expect_follows_one_worker(const Config& c, const char* what) {
    const std::vector<float> reference = one_worker(c);
    const std::vector<float> params = allreduce_training(c, 4);
    const double relative = relative_difference(params, reference);
    std::fprintf(stderr, "%s: relative difference to one worker %.3g (%s)\n", what, relative,
                 params == reference ? "bitwise" : "not bitwise");
    EXPECT_LT(relative, 1e-5) << what;
  }
};

TEST_F(HybridTest, DataTimesPipelineFollowsOneWorker) {
  Config c = grid(2, 1, 2);
  expect_follows_one_worker(c, "dp 2 x pp 2 sgd");
  c.optim.name = "adamw";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.003;
  c.optim.weight_decay = 0.1;
  expect_follows_one_worker(c, "dp 2 x pp 2 adamw");
}

// With dropout, replica d of a dp x pp grid draws the masks of data-parallel rank d accumulating
// the m micro-batches (streams (step m + k) D + d), so the grid follows that run; replicas that
// drew the same masks for different samples would not.
TEST_F(HybridTest, DataTimesPipelineWithDropoutFollowsDataParallelAccumulating) {
  Config c = grid(2, 1, 2);
  c.model.dropout = 0.3f;
  Config reference = c;
  reference.parallel.strategy = "data_parallel";
  reference.hybrid = HybridSection{};
  reference.pipeline = PipelineSection{};
  reference.train.accumulate_steps = 2;
  const std::vector<float> expected = allreduce_training(reference, 2);
  const std::vector<float> params = allreduce_training(c, 4);
  EXPECT_LT(relative_difference(params, expected), 1e-5);
}

TEST_F(HybridTest, DataTimesTensorFollowsOneWorker) {
  expect_follows_one_worker(grid(2, 2, 1), "dp 2 x tp 2 sgd");
}

TEST_F(HybridTest, ZeroOneOnTheDataAxisGivesThePlainAxisParameters) {
  for (const bool tensor : {false, true}) {
    Config c = tensor ? grid(2, 2, 1) : grid(2, 1, 2);
    c.optim.name = "adam";
    c.optim.momentum = 0.0;
    c.optim.lr = 0.01;
    const std::vector<float> plain = allreduce_training(c, 4);
    c.data_parallel.zero_stage = std::string("1");
    const std::vector<float> sharded = allreduce_training(c, 4);
    // A ring allreduce is its reduce-scatter and allgather: the same sums in the same order.
    EXPECT_EQ(sharded, plain) << (tensor ? "dp x tp" : "dp x pp");
  }
}

TEST_F(HybridTest, BytesSentPerStepEqualTheFormula) {
  for (const bool tensor : {false, true}) {
    const std::string run = dir("bytes");
    allreduce_training(tensor ? grid(2, 2, 1) : grid(2, 1, 2), 4, run);
    std::ifstream in(std::filesystem::path(run) / "summary.json");
    const auto parallel = nlohmann::json::parse(in).at("parallel");
    EXPECT_EQ(parallel.at("strategy"), "hybrid");
    ASSERT_EQ(parallel.at("per_grid_rank").size(), 4u);
    for (const auto& row : parallel.at("per_grid_rank")) {
      const double model = row.at("model_group_bytes_sent_per_step").get<double>();
      const double data = row.at("data_group_bytes_sent_per_step").get<double>();
      EXPECT_GT(model, 0.0);
      EXPECT_GT(data, 0.0);
      EXPECT_DOUBLE_EQ(model, row.at("model_group_bytes_predicted_per_step").get<double>())
          << row.dump();
      EXPECT_DOUBLE_EQ(data, row.at("data_group_bytes_predicted_per_step").get<double>())
          << row.dump();
    }
  }
}

TEST_F(HybridTest, ResumesOnTheSameGridBitwiseAndOnAnotherGridFromOneWorkersLayout) {
  Config c = grid(2, 1, 2);
  c.optim.name = "adam";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.01;
  c.train.epochs = 2;
  c.train.checkpoint_every = 1;
  // ZeRO-1: the blocks are assembled into the stage's state for the checkpoint.
  c.data_parallel.zero_stage = std::string("1");
  const std::vector<float> uninterrupted = allreduce_training(c, 4);
  const std::string run = dir("resumed");
  Config first = c;
  first.train.epochs = 1;
  allreduce_training(first, 4, run);
  EXPECT_EQ(allreduce_training(c, 4, run, /*resume=*/true), uninterrupted);
  // dp 2 x pp 2 -> dp 2 x tp 2: the checkpoint holds one worker's layout.
  const std::string other = dir("regridded");
  allreduce_training(first, 4, other);
  Config tensor = c;
  tensor.hybrid.tp = 2;
  tensor.hybrid.pp = 1;
  EXPECT_LT(
      relative_difference(allreduce_training(tensor, 4, other, /*resume=*/true), uninterrupted),
      1e-5);
}

TEST_F(HybridTest, BadGridsAreConfigErrorsNamingTheNumbers) {
  const auto error_of = [&](const Config& c, int ranks) -> std::string {
    try {
      allreduce_training(c, ranks);
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  };
  const std::string product = error_of(grid(2, 1, 2), 2);
  EXPECT_NE(product.find("2 x 1 x 2 = 4"), std::string::npos) << product;
  EXPECT_NE(product.find("2 ranks"), std::string::npos) << product;
  const std::string both = error_of(grid(1, 2, 2), 4);
  EXPECT_NE(both.find("hybrid.tp = 2 with hybrid.pp = 2"), std::string::npos) << both;
}

}  // namespace
}  // namespace dtrain::train
