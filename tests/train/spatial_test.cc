// The spatial strategy (strategies/spatial/): a small convolutional network (halos of 1 and 2
// rows, batch norm, max pooling, a fully connected head) whose images' rows are split over P ranks
// trains one worker's trajectory to rounding (1e-5 relative after 8 steps) for P = 2, 3, 4; the
// bytes each rank sends per step (halo exchange, gather, allreduces) equal the formula exactly;
// a model that cannot be split is one ConfigError naming the numbers, before anything trains.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/train/trainer.h"
#include "grid_training_fixture.h"

namespace dtrain::train {
namespace {

// conv1 3x3 (halo 1) -> bn1 -> relu -> 2x2 max pool -> conv2 5x5 (halo 2) -> tanh -> flatten ->
// fc: samples (C, H, W).
std::unique_ptr<nn::Model> small_cnn(const tensor::Shape& sample, std::int64_t classes) {
  auto model = std::make_unique<nn::Model>(sample);
  model->add(std::make_unique<nn::Conv2d>("conv1", sample[0], 4, 3, 1, 1));
  model->add(std::make_unique<nn::BatchNorm>("bn1", 4));
  model->add(std::make_unique<nn::Activation>("relu1", nn::ActivationKind::kRelu));
  model->add(std::make_unique<nn::MaxPool2d>("pool1", 2, 2));
  model->add(std::make_unique<nn::Conv2d>("conv2", 4, 5, 5, 1, 2));
  model->add(std::make_unique<nn::Activation>("tanh2", nn::ActivationKind::kTanh));
  model->add(std::make_unique<nn::Flatten>("flatten"));
  model->add(std::make_unique<nn::Linear>("fc", 5 * (sample[1] / 2) * (sample[2] / 2), classes));
  return model;
}

class SpatialTest : public testing::GridTrainingTest {
 public:
  // 96 synthetic images (2, height, 6) of 3 classes, batch 12: 8 steps in one epoch.
  static Config cnn_config(std::int64_t height) {
    Config c = images_config(2, height, 6);
    c.parallel.strategy = "spatial";
    return c;
  }

  // The ResNet of model_resnet.cc (width 2, one block per stage) on (1, 16, 8) images: split
  // through its residual blocks, strided convolutions and global pool.
  static Config resnet_config() {
    Config c = small_resnet_config();
    c.parallel.strategy = "spatial";
    return c;
  }

  bool resnet_ = false;  // the model from the config (the ResNet) instead of small_cnn

  ModelFactory model() const { return resnet_ ? nullptr : ModelFactory(small_cnn); }

  std::vector<float> one_worker(const Config& config) {
    return GridTrainingTest::one_worker(config, model());
  }

  // Rank 0's parameters after `ranks` ranks (threads) train `config`, checked equal on every rank.
  std::vector<float> spatial(const Config& config, int ranks, const std::string& run) {
    const Ranks out = train_ranks(config, ranks, run, false, model());
    for (int r = 1; r < ranks; ++r) {
      EXPECT_EQ(out.params[static_cast<std::size_t>(r)], out.params[0]);
    }
    return out.params[0];
  }
};

TEST_F(SpatialTest, SplitImagesFollowOneWorkerAndSendTheFormulasBytes) {
  struct Case {
    std::int64_t height;
    int p;
  };
  for (const Case& k : {Case{12, 2}, Case{12, 3}, Case{16, 4}}) {
    const Config c = cnn_config(k.height);
    const std::vector<float> reference = one_worker(c);
    const std::string run = dir("spatial");
    const std::vector<float> params = spatial(c, k.p, run);
    const double relative = relative_difference(params, reference);
    std::fprintf(stderr, "spatial p=%d H=%ld: relative %.3g\n", k.p, static_cast<long>(k.height),
                 relative);
    EXPECT_LE(relative, 1e-5) << "p=" << k.p;

    // Bytes per step and rank, from the communicator's counters, against the formula written out
    // here once more (B = 12, ring allreduce, h = H / P rows per rank, n_r neighbours):
    //   halo     n_r x 4 B (2 x 1 x 6 [conv1, forward only: the first layer needs no dx]
    //                       + 2 x 4 x 2 x 3 [conv2 on 4 channels, halo 2, width 3, both ways])
    //   gather   (P - 1) x 4 B x 5 (h / 2) 3
    //   allreduce ring(9 doubles) + ring(8 doubles) (bn1's sums) + ring(conv1 + bn1 + conv2
    //            parameters: 4*2*9 + 4 (conv1) + 4 + 4 (bn1) + 5*4*25 + 5 (conv2) = 589 floats)
    const auto parallel = summary_of(run).at("parallel");
    EXPECT_EQ(parallel.at("strategy"), "spatial");
    EXPECT_EQ(parallel.at("split_parameters").get<std::int64_t>(), 589);
    const double b = 12, h = static_cast<double>(k.height / k.p);
    const auto ring = [&](double n, double e, int r) {
      const auto block = [&](int i) {
        const auto n64 = static_cast<std::int64_t>(n);
        return static_cast<double>(n64 * (i + 1) / k.p - n64 * i / k.p);
      };
      return e * (2 * n - block(r) - block((r + 1) % k.p));
    };
    for (const auto& row : parallel.at("per_spatial_rank")) {
      const int r = row.at("rank").get<int>();
      const int neighbours = (r > 0) + (r + 1 < k.p);
      const double halo = neighbours * 4 * b * (2 * 1 * 6 + 2 * 4 * 2 * 3);
      const double gather = (k.p - 1) * 4 * b * 5 * (h / 2) * 3;
      const double allreduce = ring(9, 8, r) + ring(8, 8, r) + ring(589, 4, r);
      EXPECT_DOUBLE_EQ(row.at("halo_bytes_sent_per_step").get<double>(), halo) << r;
      EXPECT_DOUBLE_EQ(row.at("halo_bytes_predicted_per_step").get<double>(), halo) << r;
      EXPECT_DOUBLE_EQ(row.at("gather_bytes_sent_per_step").get<double>(), gather) << r;
      EXPECT_DOUBLE_EQ(row.at("gather_bytes_predicted_per_step").get<double>(), gather) << r;
      EXPECT_DOUBLE_EQ(row.at("allreduce_bytes_sent_per_step").get<double>(), allreduce) << r;
      EXPECT_DOUBLE_EQ(row.at("allreduce_bytes_predicted_per_step").get<double>(), allreduce) << r;
    }
  }
}

TEST_F(SpatialTest, SplitResNetFollowsOneWorkerAndSendsTheFormulasBytes) {
  resnet_ = true;
  const Config c = resnet_config();
  const std::vector<float> reference = one_worker(c);
  for (const int p : {2, 4}) {
    const std::string run = dir("spatial_resnet");
    const std::vector<float> params = spatial(c, p, run);
    const double relative = relative_difference(params, reference);
    std::fprintf(stderr, "spatial resnet p=%d: relative %.3g\n", p, relative);
    EXPECT_LE(relative, 1e-5) << "p=" << p;

    // Bytes per step and rank against the formula, B = 12: every convolution up to the global
    // pool is split, nothing gathered.
    //   halo      4 B C W ([r > 0] bottom + [r < P - 1] top) forward, top and bottom swapped
    //             backward (not for conv1, the first trainable layer), per convolution
    //   allreduce ring(2F + 1) + ring(2F) doubles per batch norm (F = 2, 2, 2, 4, 4, 4, 8, 8, 8),
    //             ring(B x 8 floats) (the pool), ring(1294 floats) (all but fc's 8 x 3 + 3)
    const auto parallel = summary_of(run).at("parallel");
    EXPECT_EQ(parallel.at("split_parameters").get<std::int64_t>(), 1294);
    EXPECT_EQ(parallel.at("gathered_before").get<std::string>(), "");
    const double b = 12;
    const auto ring = [&](std::int64_t n, double e, int r) {
      const auto block = [&](int i) { return static_cast<double>(n * (i + 1) / p - n * i / p); };
      return e * (2 * static_cast<double>(n) - block(r) - block((r + 1) % p));
    };
    for (const auto& row : parallel.at("per_spatial_rank")) {
      const int r = row.at("rank").get<int>();
      const double halo = small_resnet_halo_bytes(b, r > 0, r + 1 < p);
      double allreduce = ring(12 * 8, 4, r) + ring(1294, 4, r);
      for (const std::int64_t f : kSmallResnetBatchNormFeatures) {
        allreduce += ring(2 * f + 1, 8, r) + ring(2 * f, 8, r);
      }
      EXPECT_DOUBLE_EQ(row.at("halo_bytes_sent_per_step").get<double>(), halo) << r;
      EXPECT_DOUBLE_EQ(row.at("halo_bytes_predicted_per_step").get<double>(), halo) << r;
      EXPECT_DOUBLE_EQ(row.at("gather_bytes_sent_per_step").get<double>(), 0.0) << r;
      EXPECT_DOUBLE_EQ(row.at("gather_bytes_predicted_per_step").get<double>(), 0.0) << r;
      EXPECT_DOUBLE_EQ(row.at("allreduce_bytes_sent_per_step").get<double>(), allreduce) << r;
      EXPECT_DOUBLE_EQ(row.at("allreduce_bytes_predicted_per_step").get<double>(), allreduce) << r;
    }
  }
  // Micro-batches of 2, 3, 2, 3, 2 images (accumulate_steps 5): the batch norms' allreduces five
  // times, the pool's B_m x 8 floats each time; measured = predicted on every rank.
  Config accumulating = c;
  accumulating.train.accumulate_steps = 5;
  const std::string run = dir("spatial_resnet_accumulate");
  spatial(accumulating, 2, run);
  const nlohmann::json accumulated = summary_of(run);  // alive through the loop
  for (const auto& row : accumulated.at("parallel").at("per_spatial_rank")) {
    EXPECT_DOUBLE_EQ(row.at("allreduce_bytes_sent_per_step").get<double>(),
                     row.at("allreduce_bytes_predicted_per_step").get<double>());
    EXPECT_DOUBLE_EQ(row.at("halo_bytes_sent_per_step").get<double>(),
                     row.at("halo_bytes_predicted_per_step").get<double>());
  }
  // 28 rows over 2 ranks: stage 3's stride-2 convolution meets bands of 7 rows, so the split
  // gathers before stage 3 (Fashion-MNIST's ResNet) and still follows one worker.
  Config short_bands = resnet_config();
  short_bands.data.synthetic_shape = {1, 28, 8};
  const std::string gathered = dir("spatial_resnet_28");
  EXPECT_LE(relative_difference(spatial(short_bands, 2, gathered), one_worker(short_bands)), 1e-5);
  const nlohmann::json gathered_summary = summary_of(gathered);
  for (const auto& row : gathered_summary.at("parallel").at("per_spatial_rank")) {
    EXPECT_GT(row.at("gather_bytes_sent_per_step").get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(row.at("gather_bytes_sent_per_step").get<double>(),
                     row.at("gather_bytes_predicted_per_step").get<double>());
  }
}

TEST_F(SpatialTest, ModelsThatCannotBeSplitAreOneConfigErrorBeforeTraining) {
  struct Case {
    std::int64_t height;
    int p;
    bool cnn;
    std::string expected;
  };
  for (const Case& k : {Case{12, 5, true, "images of 12 rows do not split evenly over 5 ranks"},
                        Case{12, 4, true, "holds 3 rows here, not a multiple of the pool's 2"},
                        Case{12, 2, false, "no convolution to split"}}) {
    Config c = cnn_config(k.height);
    c.parallel.workers = k.p;
    const std::string run = dir("refused");
    try {
      // Without small_cnn: the default MLP.
      train_ranks(c, k.p, run, false, k.cnn ? ModelFactory(small_cnn) : nullptr);
      FAIL() << "no error for " << k.expected;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(k.expected), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(run) / "metrics.jsonl"));
  }
}

}  // namespace
}  // namespace dtrain::train
