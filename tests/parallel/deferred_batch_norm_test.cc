// Deferred batch norm (parallel/pipeline/deferred_batch_norm.h): m micro-batches through a batch
// norm layer give the outputs of the plain layer on each micro-batch (bitwise) and the running
// statistics of the plain layer fed the whole mini-batch at once (to the order of double sums);
// m = 1 is the plain layer bitwise.
#include "dtrain/parallel/pipeline/deferred_batch_norm.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/model.h"

namespace dtrain::parallel::pipeline {
namespace {

// (3, 2, 2) samples through one batch norm of 3 channels, momentum 0.3.
std::unique_ptr<nn::Model> bn_model() {
  auto model = std::make_unique<nn::Model>(tensor::Shape{3, 2, 2});
  model->add(std::make_unique<nn::BatchNorm>("bn", 3, 0.3f));
  model->build();
  model->init(7);
  return model;
}

tensor::Tensor batch(int step, std::int64_t samples) {
  tensor::Tensor x = tensor::Tensor::zeros({samples, 3, 2, 2});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data()[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + step) * 3.0 +
                                     0.5 * static_cast<double>(i % 3) + step);
  }
  return x;
}

std::vector<float> buffers(const nn::Model& model) {
  const auto& store = model.store();
  return {store.buffers(), store.buffers() + store.num_buffer_elements()};
}

nn::ForwardContext train_context(std::size_t slot) {
  return nn::ForwardContext{nn::Mode::kTrain, 1, 0, slot};
}

TEST(DeferredBatchNorm, RunningStatisticsOfTheWholeMiniBatchOutputsPerMicroBatch) {
  for (int m : {1, 3, 4}) {
    SCOPED_TRACE("m=" + std::to_string(m));
    auto deferred_model = bn_model();
    auto whole = bn_model();      // the whole mini-batch at once
    auto per_micro = bn_model();  // the plain layer, each micro-batch in turn
    DeferredBatchNorm deferred(*deferred_model, nn::LayerRange{0, 1});
    ASSERT_EQ(deferred.layers(), 1u);
    deferred_model->reserve_slots(static_cast<std::size_t>(m));
    const std::int64_t samples = 14;  // uneven cuts for m = 3, 4
    for (int step = 0; step < 3; ++step) {
      const tensor::Tensor x = batch(step, samples);
      whole->forward(x, train_context(0));
      deferred.begin();
      for (int k = 0; k < m; ++k) {
        const tensor::Tensor micro = x.slice(samples * k / m, samples * (k + 1) / m);
        const tensor::Tensor& got = deferred_model->forward_range(
            micro, train_context(static_cast<std::size_t>(k)), nn::LayerRange{0, 1});
        const tensor::Tensor& want = per_micro->forward(micro, train_context(0));
        ASSERT_EQ(std::vector<float>(got.data(), got.data() + got.numel()),
                  std::vector<float>(want.data(), want.data() + want.numel()))
            << "normalization per micro-batch, as the plain layer";
      }
      deferred.end();
      const std::vector<float> a = buffers(*deferred_model), b = buffers(*whole);
      ASSERT_EQ(a.size(), 6u);
      float worst = 0.0f;
      for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
      EXPECT_LE(worst, 1e-6f) << "step " << step;
      if (m == 1) {
        EXPECT_EQ(a, buffers(*per_micro));
      } else {
        EXPECT_NE(a, buffers(*per_micro));  // the plain layer applied momentum m times per step
      }
    }
    // Evaluation reads the running statistics only: the deferred model evaluates as `whole`.
    const tensor::Tensor x = batch(9, 5);
    const nn::ForwardContext eval{nn::Mode::kEval, 1, 0, 0};
    const tensor::Tensor& got = deferred_model->forward(x, eval);
    const std::vector<float> g(got.data(), got.data() + got.numel());
    const tensor::Tensor& want = whole->forward(x, eval);
    for (std::size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], want.data()[i], 1e-5f);
  }
}

TEST(DeferredBatchNorm, NoTrainForwardLeavesTheStatisticsAlone) {
  auto model = bn_model();
  DeferredBatchNorm deferred(*model, nn::LayerRange{0, 1});
  const std::vector<float> before = buffers(*model);
  deferred.begin();
  model->forward(batch(0, 4), nn::ForwardContext{nn::Mode::kEval, 1, 0, 0});
  deferred.end();
  EXPECT_EQ(buffers(*model), before);
  DeferredBatchNorm none(*model, nn::LayerRange{0, 0});
  EXPECT_EQ(none.layers(), 0u);
}

// The slots' replicas copied the recorder in reserve_slots; the destructor takes it back from
// every slot, so a train-mode forward afterwards calls no freed recorder.
TEST(DeferredBatchNorm, EverySlotGetsItsReducerBack) {
  auto model = bn_model();
  auto bn_of = [&](std::size_t slot) -> nn::BatchNorm& {
    return dynamic_cast<nn::BatchNorm&>(*model->slot_layers(slot)[0]);
  };
  {
    DeferredBatchNorm deferred(*model, nn::LayerRange{0, 1});
    model->reserve_slots(3);
    for (std::size_t slot = 0; slot < 3; ++slot) EXPECT_NE(bn_of(slot).reducer(), nullptr);
  }
  for (std::size_t slot = 0; slot < 3; ++slot) {
    EXPECT_EQ(bn_of(slot).reducer(), nullptr) << "slot " << slot;
    model->forward(batch(slot, 4), train_context(slot));
  }
}

}  // namespace
}  // namespace dtrain::parallel::pipeline
