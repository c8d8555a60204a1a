// Dense Hogwild! on the MLP: one thread is sequential mini-batch SGD bit for bit; two threads,
// whose every step collides with the other's on every parameter, still reach the one-thread loss
// within a tolerance (and run clean under ThreadSanitizer).
#include "dtrain/parallel/hogwild_dense.h"

#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/data/synthetic.h"
#include "dtrain/nn/loss.h"

namespace dtrain::parallel {
namespace {

nn::ModelSpec mlp_spec(const data::Dataset& data, std::vector<std::int64_t> hidden) {
  nn::ModelSpec spec;
  spec.name = "mlp";
  spec.input = data.sample_shape();
  spec.num_classes = data.num_classes;
  spec.hidden = std::move(hidden);
  return spec;
}

data::Dataset synthetic(std::int64_t samples, std::int64_t classes, float noise) {
  data::SyntheticConfig config;
  config.samples = samples;
  config.num_classes = classes;
  config.sample_shape = {1, 4, 4};
  config.noise = noise;
  config.seed = 2;
  return data::make_synthetic(config);
}

// Sequential mini-batch SGD, written from the formula in hogwild_dense.h on one plain model.
std::vector<float> sequential_sgd(const nn::ModelSpec& spec, const data::Dataset& data,
                                  std::int64_t batch, float weight_decay, std::uint64_t seed,
                                  const std::vector<float>& lrs) {
  auto model = nn::build_model(spec);
  model->init(seed);
  nn::ParamStore& store = model->store();
  std::vector<float> decay(static_cast<std::size_t>(store.num_params()), 0.0f);
  for (const auto& entry : store.param_entries()) {
    if (!entry.weight_decay) continue;
    for (std::int64_t i = 0; i < entry.numel; ++i) {
      decay[static_cast<std::size_t>(entry.offset + i)] = weight_decay;
    }
  }
  const data::ShuffledSampler sampler(data.size(), seed);
  tensor::Tensor x;
  tensor::Tensor dlogits;
  std::vector<std::int32_t> y;
  for (std::size_t epoch = 0; epoch < lrs.size(); ++epoch) {
    const std::vector<std::int64_t> order = sampler.epoch_order(static_cast<std::int64_t>(epoch));
    const auto n = static_cast<std::int64_t>(order.size());
    for (std::int64_t first = 0; first < n; first += batch) {
      const std::int64_t count = std::min(batch, n - first);
      data::gather_batch(data,
                         std::span<const std::int64_t>(order).subspan(
                             static_cast<std::size_t>(first), static_cast<std::size_t>(count)),
                         x, y);
      store.zero_grads();
      const tensor::Tensor& logits = model->forward(
          x,
          nn::ForwardContext{nn::Mode::kTrain, seed, static_cast<std::int64_t>(epoch) * n + first});
      nn::softmax_cross_entropy(logits, y, &dlogits);
      model->backward(dlogits);
      float* p = store.params();
      const float* g = store.grads();
      for (std::int64_t i = 0; i < store.num_params(); ++i) {
        p[i] = p[i] - lrs[epoch] * (g[i] + decay[static_cast<std::size_t>(i)] * p[i]);
      }
    }
  }
  return std::vector<float>(store.params(), store.params() + store.num_params());
}

TEST(HogwildDense, OneThreadIsSequentialMiniBatchSgdBitForBit) {
  const data::Dataset data = synthetic(300, 4, 1.0f);
  const nn::ModelSpec spec = mlp_spec(data, {8});
  HogwildDenseOptions options;
  options.threads = 1;
  options.batch_size = 16;  // 300 = 18 x 16 + 12: the last batch is short
  options.weight_decay = 1e-3f;
  options.seed = 4;
  HogwildDense hogwild(spec, data, options);
  const std::vector<float> lrs{0.1f, 0.05f};
  for (std::size_t e = 0; e < lrs.size(); ++e) {
    const HogwildEpoch epoch = hogwild.run_epoch(static_cast<std::int64_t>(e), lrs[e]);
    EXPECT_EQ(epoch.updates, 300);
  }
  const std::vector<float> expected = sequential_sgd(spec, data, 16, 1e-3f, 4, lrs);
  ASSERT_EQ(hogwild.num_params(), static_cast<std::int64_t>(expected.size()));
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(hogwild.weights()[i], expected[i]) << "parameter " << i;
  }
}

// Any dense model without batch norm, LeNet-5 and layer lists included: one thread is sequential
// SGD bit for bit; a list with batch norm (running statistics each thread would keep for itself)
// is refused.
TEST(HogwildDense, ConvolutionsAndLayerListsToo) {
  data::SyntheticConfig config;
  config.samples = 64;
  config.num_classes = 4;
  config.sample_shape = {1, 28, 28};
  config.seed = 3;
  const data::Dataset data = data::make_synthetic(config);
  nn::ModelSpec lenet;
  lenet.name = "lenet5";
  lenet.input = data.sample_shape();
  lenet.num_classes = data.num_classes;
  nn::ModelSpec listed = lenet;
  listed.name = "layers";
  listed.layer_list = nn::lenet5_layers(lenet);
  for (const nn::ModelSpec& spec : {lenet, listed}) {
    HogwildDenseOptions options;
    options.threads = 1;
    options.batch_size = 16;
    options.seed = 5;
    HogwildDense hogwild(spec, data, options);
    hogwild.run_epoch(0, 0.05f);
    // Each Hogwild! thread runs its kernels on a pool of one; so does the twin, since a
    // convolution's weight gradient sums per-thread parts (their order follows the pool's size).
    const ScopedComputePool one_thread(1);
    const std::vector<float> expected = sequential_sgd(spec, data, 16, 0.0f, 5, {0.05f});
    ASSERT_EQ(hogwild.num_params(), static_cast<std::int64_t>(expected.size())) << spec.name;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      ASSERT_EQ(hogwild.weights()[i], expected[i]) << spec.name << " parameter " << i;
    }
  }
  nn::ModelSpec resnet = lenet;
  resnet.name = "resnet";
  resnet.resnet_width = 2;
  nn::ModelSpec with_batch_norm = resnet;
  with_batch_norm.name = "layers";
  with_batch_norm.layer_list = nn::resnet_layers(resnet);
  try {
    HogwildDense hogwild(with_batch_norm, data, HogwildDenseOptions{1, 16});
    ADD_FAILURE() << "a model with batch norm was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("batch-norm running statistics"), std::string::npos)
        << e.what();
  }
}

TEST(HogwildDense, TwoThreadsReachTheOneThreadLoss) {
  const data::Dataset data = synthetic(2000, 6, 2.0f);
  const nn::ModelSpec spec = mlp_spec(data, {32});
  auto train = [&](int threads) {
    HogwildDenseOptions options;
    options.threads = threads;
    options.batch_size = 16;
    options.seed = 1;
    HogwildDense hogwild(spec, data, options);
    const DenseEvaluation start = hogwild.evaluate(data);
    for (int e = 0; e < 4; ++e) {
      const HogwildEpoch epoch = hogwild.run_epoch(e, 0.05f);
      EXPECT_EQ(epoch.thread_updates[0] + (threads > 1 ? epoch.thread_updates[1] : 0), 2000);
    }
    const DenseEvaluation end = hogwild.evaluate(data);
    EXPECT_LT(end.loss, 0.5 * start.loss) << threads << " threads: training must make progress";
    return end;
  };
  const DenseEvaluation one = train(1);
  const DenseEvaluation two = train(2);
  EXPECT_NEAR(two.loss, one.loss, 0.1 * one.loss + 0.01);
  EXPECT_NEAR(two.accuracy, one.accuracy, 0.03);
}

TEST(HogwildDense, RejectsBadOptions) {
  const data::Dataset data = synthetic(10, 2, 1.0f);
  const nn::ModelSpec spec = mlp_spec(data, {4});
  EXPECT_THROW(HogwildDense(spec, data, HogwildDenseOptions{0}), ConfigError);
  EXPECT_THROW(HogwildDense(spec, data, HogwildDenseOptions{1, 0}), ConfigError);
  EXPECT_THROW(HogwildDense(spec, data, HogwildDenseOptions{1, 4, -1.0f}), ConfigError);
}

}  // namespace
}  // namespace dtrain::parallel
