// Spatial parallelism on the process grid (hybrid.sp; strategies/hybrid/ running
// strategies/spatial/ on each spatial group): the ResNet (width 2, one block per stage) on
// (1, 16, 8) images, dp 2 x sp 2 on 4 thread ranks, 8 steps of a global batch of 12 (and dp 2 x
// sp 3 and 4 on 6 and 8 ranks). Each replica
// splits the rows of its 6 images over its 2 ranks; the data group sums the gradients.
//   - The parameters follow one worker on the same global batch accumulating 2 micro-batches of 6
//     (each replica's batch norms see its 6 whole images, as a micro-batch of 6 does) to 1e-5
//     relative; the running statistics end equal to the mean of --workers 2 data parallelism's two
//     ranks' (each rank's batch norms see its 6 images).
//   - The bytes every rank sends per step equal the formula written out here: the spatial split's
//     halo and allreduces on 6 images, plus the data group's 2 (D-1)/D x 4 N.
//   - ZeRO-1 on the data axis gives the plain axis's parameters bitwise (D = 2); a run resumed on
//     the same grid equals the uninterrupted one bitwise, and its checkpoint (one worker's layout)
//     resumes on dp 1 x sp 4 accumulating 2 micro-batches of 6 within 1e-5.
//   - A grid whose product is not the ranks, images that do not split over sp, and sp with tp are
//     one-line ConfigErrors naming the numbers.
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

class SpatialGridTest : public testing::GridTrainingTest {
 public:
  // small_resnet_config's 96 synthetic images (1, 16, 8) of 3 classes, batch 12: 8 steps in one
  // epoch; dp x sp grid.
  static Config grid(int dp, int sp) {
    Config c = small_resnet_config();
    c.parallel.strategy = "hybrid";
    c.hybrid.dp = dp;
    c.hybrid.sp = sp;
    return c;
  }

  // One worker on the same global batch accumulating 2 micro-batches of 6: what a grid of 2
  // replicas follows.
  static Config accumulating_one_worker(const Config& c) {
    Config one = plain_data_parallel(c);
    one.train.accumulate_steps = 2;
    return one;
  }
};

TEST_F(SpatialGridTest, DataTimesSpatialFollowsOneWorkerAndSendsTheFormulasBytes) {
  const Config c = grid(2, 2);
  const Config one = accumulating_one_worker(c);
  const std::vector<float> reference = one_worker(one);

  const std::string run = dir("dp2-sp2");
  const Ranks ranks = train_ranks(c, 4, run);
  for (int r = 1; r < 4; ++r) {
    EXPECT_EQ(ranks.params[static_cast<std::size_t>(r)], ranks.params[0]) << r;
    EXPECT_EQ(ranks.buffers[static_cast<std::size_t>(r)], ranks.buffers[0]) << r;
  }
  const double relative = relative_difference(ranks.params[0], reference);
  std::fprintf(stderr, "dp 2 x sp 2: relative difference to one worker %.3g\n", relative);
  EXPECT_LT(relative, 1e-5);

  // Running statistics: the mean of --workers 2 data parallelism's ranks' (which differ).
  Config data_parallel = one;
  data_parallel.train.accumulate_steps = 1;
  const Ranks dp2 = train_ranks(data_parallel, 2);
  ASSERT_NE(dp2.buffers[0], dp2.buffers[1]);
  std::vector<float> mean(dp2.buffers[0].size());
  for (std::size_t i = 0; i < mean.size(); ++i) {
    mean[i] = (dp2.buffers[0][i] + dp2.buffers[1][i]) / 2.0f;
  }
  EXPECT_LT(relative_difference(ranks.buffers[0], mean), 1e-5);

  // Bytes per step and rank, b = 6 images per replica, S = 2 (a ring allreduce of n elements of e
  // bytes over 2 ranks sends e n):
  //   spatial group  halo 4 b C W ([r > 0] bottom + [r < S-1] top) forward per convolution, top
  //                  and bottom swapped backward (not conv1: the first trainable layer)
  //                  + 8 (2F + 1) + 8 (2F) per batch norm + 4 b 8 (the pool) + 4 x 1294 (split
  //                  parameters: all but fc)
  //   data group     2 (D-1)/D x 4 N = 4 x 1321 (all parameters)
  const double b = 6;
  const auto parallel = summary_of(run).at("parallel");
  EXPECT_EQ(parallel.at("strategy"), "hybrid");
  EXPECT_EQ(parallel.at("grid").at("spatial_groups").dump(), "[[0,1],[2,3]]");
  EXPECT_EQ(parallel.at("grid").at("data_groups").dump(), "[[0,2],[1,3]]");
  ASSERT_EQ(parallel.at("per_grid_rank").size(), 4u);
  for (const auto& row : parallel.at("per_grid_rank")) {
    const bool above = row.at("sp").get<int>() == 1;
    double model = 4 * b * 8 + 4 * 1294.0 + small_resnet_halo_bytes(b, above, !above);
    for (const auto f : kSmallResnetBatchNormFeatures) {
      model += 8 * (2 * static_cast<double>(f) + 1) + 8 * (2 * static_cast<double>(f));
    }
    EXPECT_DOUBLE_EQ(row.at("model_group_bytes_sent_per_step").get<double>(), model) << row;
    EXPECT_DOUBLE_EQ(row.at("model_group_bytes_predicted_per_step").get<double>(), model) << row;
    EXPECT_DOUBLE_EQ(row.at("data_group_bytes_sent_per_step").get<double>(), 4 * 1321.0) << row;
    EXPECT_DOUBLE_EQ(row.at("data_group_bytes_predicted_per_step").get<double>(), 4 * 1321.0)
        << row;
  }
}

// Three and four spatial ranks inside each of 2 replicas (6 and 8 thread ranks): the bands of 24
// rows over 3 (8, 4 and 2 rows through the stages) and of 16 over 4 (4, 2, 1) follow one worker
// accumulating 2 micro-batches of 6 as dp 2 x sp 2 does.
TEST_F(SpatialGridTest, ThreeAndFourSpatialRanksPerReplicaFollowOneWorker) {
  struct Case {
    int sp;
    std::int64_t height;
  };
  for (const Case& k : {Case{3, 24}, Case{4, 16}}) {
    Config c = grid(2, k.sp);
    c.data.synthetic_shape = {1, k.height, 8};
    const std::vector<float> reference = one_worker(accumulating_one_worker(c));
    const Ranks ranks = train_ranks(c, 2 * k.sp);
    const double relative = relative_difference(ranks.params[0], reference);
    std::fprintf(stderr, "dp 2 x sp %d: relative difference to one worker %.3g\n", k.sp, relative);
    EXPECT_LT(relative, 1e-5) << "sp " << k.sp;
    for (int r = 1; r < 2 * k.sp; ++r) {
      EXPECT_EQ(ranks.params[static_cast<std::size_t>(r)], ranks.params[0]) << k.sp << " " << r;
    }
  }
}

TEST_F(SpatialGridTest, ZeroOneAndResumesOnTheSameGridBitwiseAndOnAnotherFromOneWorkersLayout) {
  Config c = grid(2, 2);
  c.optim.name = "adam";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.01;
  c.train.epochs = 2;
  c.train.checkpoint_every = 1;
  const std::vector<float> plain = train_ranks(c, 4).params[0];
  c.data_parallel.zero_stage = std::string("1");
  const std::vector<float> uninterrupted = train_ranks(c, 4).params[0];
  // A ring allreduce over 2 ranks is its reduce-scatter and allgather: the same sums.
  EXPECT_EQ(uninterrupted, plain);

  Config first = c;
  first.train.epochs = 1;
  const std::string run = dir("resumed");
  train_ranks(first, 4, run);
  EXPECT_EQ(train_ranks(c, 4, run, /*resume=*/true).params[0], uninterrupted);
  // The same checkpoint on dp 1 x sp 4: 4 rows per rank, the whole batch in one replica, in 2
  // micro-batches of 6 so that the batch norms see the 6 images a replica of dp 2 saw.
  const std::string other = dir("regridded");
  train_ranks(first, 4, other);
  Config regrid = c;
  regrid.hybrid.dp = 1;
  regrid.hybrid.sp = 4;
  regrid.train.accumulate_steps = 2;
  const double relative =
      relative_difference(train_ranks(regrid, 4, other, /*resume=*/true).params[0], uninterrupted);
  std::fprintf(stderr, "dp 2 x sp 2 checkpoint resumed on dp 1 x sp 4: relative %.3g\n", relative);
  EXPECT_LT(relative, 1e-5);
}

TEST_F(SpatialGridTest, BadGridsAreOneLineConfigErrorsNamingTheNumbers) {
  const auto expect_error = [&](const Config& c, int ranks, const std::vector<std::string>& parts) {
    const std::string what = config_error_of([&] { train_ranks(c, ranks); });
    for (const std::string& part : parts) {
      EXPECT_NE(what.find(part), std::string::npos) << what;
    }
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  };
  expect_error(grid(2, 2), 2, {"dp x sp x tp x pp = 2 x 2 x 1 x 1 = 4", "the 2 ranks"});
  expect_error(grid(2, 3), 6, {"images of 16 rows do not split evenly over 3 ranks"});
  Config tensor = grid(1, 2);
  tensor.hybrid.tp = 2;
  expect_error(tensor, 4, {"hybrid.sp = 2 with hybrid.tp = 2 and hybrid.pp = 1"});
}

}  // namespace
}  // namespace dtrain::train
