// GradientSynchronizer: after finish() every rank's gradient buffer holds the sum over ranks, for
// every fusion size, with and without overlap, for P = 1..4; buckets launch during backward.
#include "dtrain/parallel/gradient_synchronizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/reducers/zero1_reducer.h"

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

namespace dtrain::parallel {
namespace {

// The fused ZeRO-1 reducer (reducers/zero1_reducer.h): a barrier, then update() sums every rank's
// gradients inside the update, in the ring's order: the parameters and momentum equal a
// reduce-scatter followed by step() bit for bit, over several steps, for P = 1..4. Runs under TSan
// (the reads of other ranks' buffers are ordered by the barrier and the allgather).
// Every rule that updates in parts: SGD with momentum and weight decay (the two-buffer loop),
// Nesterov and plain SGD (the chunked path of Sgd::step_range), Adam and AdamW.
std::vector<optim::OptimizerConfig> fused_optimizers() {
  optim::OptimizerConfig momentum;
  momentum.momentum = 0.9;
  momentum.weight_decay = 0.01;
  optim::OptimizerConfig nesterov = momentum;
  nesterov.nesterov = true;
  optim::OptimizerConfig plain;
  optim::OptimizerConfig adam;
  adam.name = "adam";
  adam.weight_decay = 0.01;
  optim::OptimizerConfig adamw = adam;
  adamw.name = "adamw";
  return {momentum, nesterov, plain, adam, adamw};
}

TEST(GradientSynchronizer, FusedUpdateEqualsReduceScatterThenStep) {
  for (const optim::OptimizerConfig& config : fused_optimizers()) {
    for (const int ranks : {1, 2, 3, 4}) {
      comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
        auto fused_model = small_mlp();
        auto plain_model = small_mlp();
        DataParallelOptions options;
        options.overlap = false;
        options.reducer = zero1_reducer();
        DataParallelOptions fused_options = options;
        fused_options.reducer = fused_zero1_reducer();
        GradientSynchronizer fused(comm, *fused_model, fused_options);
        GradientSynchronizer plain(comm, *plain_model, options);
        auto fused_optimizer = optim::make_optimizer(config, fused.update_segments());
        auto plain_optimizer = optim::make_optimizer(config, plain.update_segments());
        for (int step = 0; step < 3; ++step) {
          for (nn::Model* model : {fused_model.get(), plain_model.get()}) {
            float* g = model->store().grads();
            for (std::int64_t i = 0; i < model->store().num_params(); ++i) {
              g[i] = 0.1f * static_cast<float>(i % 97) + 0.37f * static_cast<float>(comm.rank()) -
                     0.05f * static_cast<float>(step);
            }
          }
          fused.begin_step();
          fused.finish();
          fused.update(*fused_optimizer, 0.1);
          fused.gather_parameters();
          plain.begin_step();
          plain.finish();
          plain_optimizer->step(plain_model->store().params(), plain_model->store().grads(), 0.1);
          plain.gather_parameters();
          const nn::ParamStore& a = fused_model->store();
          const nn::ParamStore& b = plain_model->store();
          ASSERT_EQ(std::vector<float>(a.params(), a.params() + a.num_params()),
                    std::vector<float>(b.params(), b.params() + b.num_params()))
              << ranks << " ranks, rank " << comm.rank() << ", step " << step << ", " << config.name
              << " momentum " << config.momentum << (config.nesterov ? " (Nesterov)" : "");
          ASSERT_EQ(fused_optimizer->state().size(), plain_optimizer->state().size());
          for (std::size_t s = 0; s < plain_optimizer->state().size(); ++s) {
            ASSERT_EQ(fused_optimizer->state()[s].values, plain_optimizer->state()[s].values);
          }
        }
        EXPECT_EQ(fused_optimizer->steps(), 3);
      });
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
