// The hybrid strategy (strategies/hybrid/) on 4 thread ranks: 2 replicas of a 2-stage pipeline and
// 2 replicas of a 2-way tensor split train the parameters of one worker on the same global batch
// (1e-5 relative); ZeRO-1 on the data axis gives the plain data axis's parameters; the bytes each
// rank sends per step equal the formula; a resumed grid equals the uninterrupted run, and its
// checkpoint (one worker's layout) resumes on another grid; bad grids are one-line errors. The
// pipeline of tensor-parallel stages (tp x pp, tp x pp x dp on 8 ranks) follows one worker too,
// sends the bytes of its formula and resumes bitwise on the same grid.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/trainer.h"
#include "grid_training_fixture.h"

namespace dtrain::train {
namespace {

class HybridTest : public testing::GridTrainingTest {
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

  // The grid should follow one worker on the same global batch (no accumulation).
  void expect_follows_one_worker(const Config& c, const char* what, int ranks = 4,
                                 const std::string& run = "") {
    const std::vector<float> reference = one_worker(plain_data_parallel(c));
    const std::vector<float> params = allreduce_training(c, ranks, run);
    const double relative = relative_difference(params, reference);
    std::fprintf(stderr, "%s: relative difference to one worker %.3g (%s)\n", what, relative,
                 params == reference ? "bitwise" : "not bitwise");
    EXPECT_LT(relative, 1e-5) << what;
  }

  // The grid with Adam, ZeRO-1 on the data axis, 2 epochs and a checkpoint each: a run resumed
  // from its epoch-1 checkpoint must equal the uninterrupted run bitwise; `regrid` (another grid)
  // must continue a fresh epoch-1 checkpoint of this grid within 1e-5 of it.
  void expect_resumes(int dp, int tp, int pp, Config regrid) {
    Config c = grid(dp, tp, pp);
    c.optim.name = "adam";
    c.optim.momentum = 0.0;
    c.optim.lr = 0.01;
    c.train.epochs = 2;
    c.train.checkpoint_every = 1;
    c.data_parallel.zero_stage = std::string("1");
    const int ranks = dp * tp * pp;
    const std::vector<float> uninterrupted = allreduce_training(c, ranks);
    const std::string run = dir("resumed");
    Config first = c;
    first.train.epochs = 1;
    allreduce_training(first, ranks, run);
    EXPECT_EQ(allreduce_training(c, ranks, run, /*resume=*/true), uninterrupted);
    const std::string other = dir("regridded");
    allreduce_training(first, ranks, other);
    regrid.optim = c.optim;
    regrid.train = c.train;
    regrid.data_parallel = c.data_parallel;
    const int regrid_ranks =
        static_cast<int>(regrid.hybrid.dp * regrid.hybrid.tp * regrid.hybrid.pp);
    EXPECT_LT(relative_difference(allreduce_training(regrid, regrid_ranks, other, /*resume=*/true),
                                  uninterrupted),
              1e-5);
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
  Config reference = plain_data_parallel(c);
  reference.train.accumulate_steps = 2;
  const std::vector<float> expected = allreduce_training(reference, 2);
  const std::vector<float> params = allreduce_training(c, 4);
  EXPECT_LT(relative_difference(params, expected), 1e-5);
}

TEST_F(HybridTest, DataTimesTensorFollowsOneWorker) {
  expect_follows_one_worker(grid(2, 2, 1), "dp 2 x tp 2 sgd");
}

TEST_F(HybridTest, ZeroOneOnTheDataAxisGivesThePlainAxisParameters) {
  for (const int tensor : {1, 2}) {
    for (const int stages : {1, 2}) {
      if (tensor == 1 && stages == 1) continue;
      Config c = grid(2, tensor, stages);
      c.optim.name = "adam";
      c.optim.momentum = 0.0;
      c.optim.lr = 0.01;
      const int ranks = 2 * tensor * stages;
      const std::vector<float> plain = allreduce_training(c, ranks);
      c.data_parallel.zero_stage = std::string("1");
      const std::vector<float> sharded = allreduce_training(c, ranks);
      // A ring allreduce is its reduce-scatter and allgather: the same sums in the same order.
      EXPECT_EQ(sharded, plain) << "dp 2 x tp " << tensor << " x pp " << stages;
    }
  }
}

TEST_F(HybridTest, BytesSentPerStepEqualTheFormula) {
  for (const bool tensor : {false, true}) {
    const std::string run = dir("bytes");
    allreduce_training(tensor ? grid(2, 2, 1) : grid(2, 1, 2), 4, run);
    const auto parallel = summary_of(run).at("parallel");
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
  // dp 2 x pp 2 -> dp 2 x tp 2: the checkpoint holds one worker's layout (ZeRO-1: the blocks are
  // assembled into the stage's state for it).
  expect_resumes(2, 1, 2, grid(2, 2, 1));
}

// dp 2 x tp 2 with dropout: replica d draws the masks of data-parallel rank d of 2 (streams
// step D + d), so the grid follows --workers 2 data parallelism; replicas drawing the same masks
// (replica 0's stream) for different samples would not (22% away when tried).
TEST_F(HybridTest, DataTimesTensorWithDropoutFollowsDataParallel) {
  Config c = grid(2, 2, 1);
  c.model.dropout = 0.3f;
  Config reference = plain_data_parallel(c);
  const std::vector<float> expected = allreduce_training(reference, 2);
  const std::vector<float> params = allreduce_training(c, 4);
  EXPECT_LT(relative_difference(params, expected), 1e-5);
  // The 3-D grid: each replica's pipeline of split stages draws as data-parallel rank d
  // accumulating the m = 2 micro-batches, streams (step m + k) D + d.
  Config three = grid(2, 2, 2);
  three.model.dropout = 0.3f;
  reference.train.accumulate_steps = 2;
  EXPECT_LT(relative_difference(allreduce_training(three, 8), allreduce_training(reference, 2)),
            1e-5);
}

// Checks every rank's bytes per step (model group: pipeline p2p + the tensor split's collectives
// of its stage; data group) against the formula, in run folder `run`, on `ranks` ranks.
void expect_bytes_equal_formula(const std::string& run, std::size_t ranks) {
  const auto parallel = testing::GridTrainingTest::summary_of(run).at("parallel");
  EXPECT_EQ(parallel.at("strategy"), "hybrid");
  ASSERT_EQ(parallel.at("per_grid_rank").size(), ranks);
  for (const auto& row : parallel.at("per_grid_rank")) {
    const double model = row.at("model_group_bytes_sent_per_step").get<double>();
    EXPECT_GT(model, 0.0);
    EXPECT_DOUBLE_EQ(model, row.at("model_group_bytes_predicted_per_step").get<double>())
        << row.dump();
    EXPECT_DOUBLE_EQ(row.at("data_group_bytes_sent_per_step").get<double>(),
                     row.at("data_group_bytes_predicted_per_step").get<double>())
        << row.dump();
  }
}

// A pipeline of tensor-parallel stages: 2 stages of a 2-way tensor split (the MLP's all-gather
// form), alone and with 2 data replicas around it (8 ranks).
TEST_F(HybridTest, TensorTimesPipelineFollowsOneWorkerAndSendsTheFormulasBytes) {
  const std::string run = dir("tp-pp");
  expect_follows_one_worker(grid(1, 2, 2), "tp 2 x pp 2 sgd", 4, run);
  expect_bytes_equal_formula(run, 4);
  const std::string run3 = dir("tp-pp-dp");
  expect_follows_one_worker(grid(2, 2, 2), "dp 2 x tp 2 x pp 2 sgd", 8, run3);
  expect_bytes_equal_formula(run3, 8);
  const auto g = summary_of(run3).at("parallel").at("grid");
  EXPECT_EQ(g.at("tensor_groups").dump(), "[[0,1],[2,3],[4,5],[6,7]]");
  EXPECT_EQ(g.at("data_groups").dump(), "[[0,2],[1,3],[4,6],[5,7]]");
  EXPECT_EQ(g.at("pipeline_groups").dump(), "[[0,4],[1,5],[2,6],[3,7]]");
  // P = 3 and 4 stages of the MLP's 6 layers, on 6 and 8 ranks.
  for (const int stages : {3, 4}) {
    const std::string run_p = dir("tp-pp-n");
    const std::string what = fmt::format("tp 2 x pp {}", stages);
    expect_follows_one_worker(grid(1, 2, stages), what.c_str(), 2 * stages, run_p);
    expect_bytes_equal_formula(run_p, static_cast<std::size_t>(2 * stages));
  }
}

// Batch-norm running statistics on dp 2 x pp 2 (a ResNet): before the final evaluation the data
// group replaces each replica's by their mean, so every rank ends with the same buffers, equal to
// the mean of the two ranks' buffers under --workers 2 data parallelism accumulating the m = 2
// micro-batches (the running-statistics update is linear: the mean taken once at the end is the
// mean taken after every step, to rounding). A resume from the epoch-1 checkpoint is bitwise.
TEST_F(HybridTest, BatchNormRunningStatisticsAreTheMeanOverTheDataAxis) {
  Config c = grid(2, 1, 2);
  c.model.name = "resnet";
  c.model.resnet_width = 4;
  c.data.synthetic_shape = {1, 8, 8};
  Config reference = plain_data_parallel(c);
  reference.train.accumulate_steps = 2;
  const auto ranks = train_ranks(reference, 2).buffers;
  ASSERT_GT(ranks[0].size(), 0u);
  ASSERT_NE(ranks[0], ranks[1]);  // the replicas' statistics differ before the mean
  std::vector<float> mean(ranks[0].size());
  for (std::size_t i = 0; i < mean.size(); ++i) mean[i] = (ranks[0][i] + ranks[1][i]) / 2.0f;
  const auto grid_buffers = train_ranks(c, 4).buffers;
  for (int r = 1; r < 4; ++r) EXPECT_EQ(grid_buffers[static_cast<std::size_t>(r)], grid_buffers[0]);
  EXPECT_LT(relative_difference(grid_buffers[0], mean), 1e-5);
  // Resumed on the same grid from the epoch-1 checkpoint (which holds the mean): the parameters
  // and the statistics of the uninterrupted run, bitwise.
  c.train.epochs = 2;
  c.train.checkpoint_every = 1;
  const Ranks uninterrupted = train_ranks(c, 4);
  const std::string run = dir("bn-resumed");
  Config first = c;
  first.train.epochs = 1;
  train_ranks(first, 4, run);
  const Ranks resumed = train_ranks(c, 4, run, /*resume=*/true);
  EXPECT_EQ(resumed.buffers[0], uninterrupted.buffers[0]);
  EXPECT_EQ(resumed.params[0], uninterrupted.params[0]);
}

// The GPT cut into 2 stages of Megatron's split (heads, MLP units), the tied head on stage 1;
// alone (4 ranks) and with 2 data replicas around it (8).
TEST_F(HybridTest, TensorTimesPipelineGptFollowsOneWorker) {
  Config c = small_gpt_config("grid", 2, 16);
  c.train.epochs = 1;
  c.train.seed = 5;
  c.parallel.strategy = "hybrid";
  c.hybrid.tp = 2;
  c.hybrid.pp = 2;
  c.pipeline.micro_batches = 2;
  const std::string run = dir("gpt");
  expect_follows_one_worker(c, "gpt tp 2 x pp 2", 4, run);
  expect_bytes_equal_formula(run, 4);
  c.hybrid.dp = 2;
  const std::string run3 = dir("gpt-3d");
  expect_follows_one_worker(c, "gpt dp 2 x tp 2 x pp 2", 8, run3);
  expect_bytes_equal_formula(run3, 8);
}

// tp 2 x pp 2 x dp 2 with ZeRO-1 on the data axis and Adam: a run resumed from its epoch-1
// checkpoint equals the uninterrupted run bitwise; dp 2 x pp 2 continues the same checkpoint.
TEST_F(HybridTest, TensorTimesPipelineResumesBitwiseOnTheSameGridAndOnAnother) {
  expect_resumes(2, 2, 2, grid(2, 1, 2));
}

TEST_F(HybridTest, BadGridsAreConfigErrorsNamingTheNumbers) {
  const auto error_of = [&](const Config& c, int ranks) {
    return config_error_of([&] { allreduce_training(c, ranks); });
  };
  const std::string product = error_of(grid(2, 1, 2), 2);
  EXPECT_NE(product.find("2 x 1 x 2 = 4"), std::string::npos) << product;
  EXPECT_NE(product.find("2 ranks"), std::string::npos) << product;
  // mlp_config's hidden widths 16 and 8 do not split over 3 tensor ranks.
  const std::string split = error_of(grid(1, 3, 2), 6);
  EXPECT_NE(split.find("16 outputs"), std::string::npos) << split;
  EXPECT_NE(split.find("3 ranks"), std::string::npos) << split;
}

// A balanced cut (pipeline.partition = "balanced") on the grid: every rank times the layers and
// the sum over the whole grid decides, so the data replicas' and the tensor ranks' pipelines cut
// alike (each timing its own would cut differently when two cuts are close, and the data group's
// sums or the tensor group's collectives would then not meet).
TEST_F(HybridTest, BalancedCutsAreTheSameOnEveryPipelineOfTheGrid) {
  for (const auto& [dp, tp] : {std::pair{2, 1}, std::pair{1, 2}, std::pair{2, 2}}) {
    Config balanced = grid(dp, tp, 2);
    balanced.pipeline.partition = "balanced";
    const std::string what = fmt::format("balanced dp {} x tp {} x pp 2", dp, tp);
    const std::string run = dir(fmt::format("balanced-{}-{}", dp, tp));
    expect_follows_one_worker(balanced, what.c_str(), dp * tp * 2, run);
    expect_bytes_equal_formula(run, static_cast<std::size_t>(dp * tp * 2));
  }
}

}  // namespace
}  // namespace dtrain::train
