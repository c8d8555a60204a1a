// GradientSynchronizer: after finish() every rank's gradient buffer holds the sum over ranks, for
// every fusion size, with and without overlap, for P = 1..4; buckets launch during backward.
#include "dtrain/parallel/gradient_synchronizer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::parallel {
namespace {

std::unique_ptr<nn::Model> small_mlp() {
  nn::ModelSpec spec;
  spec.name = "mlp";
  spec.input = {12};
  spec.num_classes = 3;
  spec.hidden = {7, 5};
  auto model = nn::build_model(spec);
  model->init(1);
  return model;
}

// Rank r's gradient element i: exact in f32 and distinct per (rank, element).
float grad_value(int rank, std::int64_t i) { return static_cast<float>((i % 97) + 1000 * rank); }

class GradientSynchronizerSweep
    : public ::testing::TestWithParam<std::tuple<int, std::int64_t, bool>> {};

TEST_P(GradientSynchronizerSweep, SumsGradientsOverRanks) {
  const auto [ranks, fusion_bytes, overlap] = GetParam();
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    DataParallelOptions options;
    options.fusion_bytes = fusion_bytes;
    options.overlap = overlap;
    GradientSynchronizer sync(comm, *model, options);
    nn::ParamStore& store = model->store();
    for (int step = 0; step < 2; ++step) {
      for (std::int64_t i = 0; i < store.num_params(); ++i) {
        store.grads()[i] = grad_value(comm.rank(), i) + static_cast<float>(step);
      }
      sync.begin_step();
      for (std::size_t layer = model->layers().size(); layer-- > 0;) sync.on_layer_done(layer);
      sync.finish();
      for (std::int64_t i = 0; i < store.num_params(); ++i) {
        float expected = 0.0f;
        for (int r = 0; r < ranks; ++r) expected += grad_value(r, i) + static_cast<float>(step);
        ASSERT_EQ(store.grads()[i], expected) << "rank " << comm.rank() << " element " << i;
      }
      // Every bucket ran after it was launched and the timings are ordered.
      for (const auto& t : sync.timings()) {
        EXPECT_LE(t.launched, t.started);
        EXPECT_LE(t.started, t.finished);
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(RanksFusionOverlap, GradientSynchronizerSweep,
                         ::testing::Combine(::testing::Values(1, 2, 3, 4),
                                            ::testing::Values(std::int64_t{0}, std::int64_t{64},
                                                              std::int64_t{1} << 20),
                                            ::testing::Bool()));

TEST(GradientSynchronizer, OverlapLaunchesTheLastLayersBucketBeforeBackwardEnds) {
  comm::spawn_ranks(2, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    DataParallelOptions options;
    options.fusion_bytes = 0;  // one bucket per tensor
    GradientSynchronizer sync(comm, *model, options);
    sync.begin_step();
    const std::size_t last = model->layers().size() - 1;
    sync.on_layer_done(last);
    const auto after_last_layer = BucketTiming::Clock::now();
    for (std::size_t layer = last; layer-- > 0;) sync.on_layer_done(layer);
    sync.finish();
    // The output layer's two tensors were launched when its backward finished.
    EXPECT_LE(sync.timings()[0].launched, after_last_layer);
    EXPECT_LE(sync.timings()[1].launched, after_last_layer);
    EXPECT_GT(sync.timings().back().launched, after_last_layer);
  });
}

TEST(GradientSynchronizer, WithoutOverlapNothingIsLaunchedDuringBackward) {
  comm::spawn_ranks(2, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    DataParallelOptions options;
    options.overlap = false;
    options.fusion_bytes = 0;
    GradientSynchronizer sync(comm, *model, options);
    sync.begin_step();
    for (std::size_t layer = model->layers().size(); layer-- > 0;) sync.on_layer_done(layer);
    const auto before_finish = BucketTiming::Clock::now();
    sync.finish();
    for (const auto& t : sync.timings()) EXPECT_GE(t.launched, before_finish);
  });
}

}  // namespace
}  // namespace dtrain::parallel
