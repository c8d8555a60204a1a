// One training step of the reference GPT (nn/model_gpt.cc: V 256, block 128, d 128, 4 heads,
// 4 layers; batch 32, so 4,096 tokens a step) and its parts at the same shapes, to see where the
// time goes. The whole-system figure is `dtrain bench train`; this is the model alone.
// Run: build/bench/gpt_bench --benchmark_counters_tabular=true
//
//   BM_GptStep/threads         forward, loss, backward, AdamW update (what train_charlm.py times)
//   BM_GptForwardBackward      forward, loss and backward only
//   BM_AttentionCore/tile      the attention core (QK^T, causal softmax, PV and their backward) of
//                              one layer; GFLOP/s counts the full (T, T) square, 12 T^2 dh per head
//   BM_LinearStep/in/out       one Linear's forward and backward (3 GEMMs) over 4,096 rows
//   BM_LayerNormStep, BM_GeluStep, BM_LossStep, BM_HeadStep: the rest, at one layer's shapes
// docs/TRANSFORMER.md has the figures and the bound (5.70 MFLOP per token).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/causal_self_attention.h"
#include "dtrain/nn/embedding.h"
#include "dtrain/nn/layer_norm.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/tied_output_head.h"
#include "dtrain/optim/adam.h"

namespace {

using namespace dtrain;

constexpr std::int64_t kBatch = 32;
constexpr std::int64_t kBlock = 128;
constexpr std::int64_t kDim = 128;
constexpr std::int64_t kHeads = 4;
constexpr std::int64_t kVocab = 256;
constexpr std::int64_t kTokens = kBatch * kBlock;
// Forward and backward FLOPs per token (model_gpt.cc): 72 L d^2 + 6 d V + 12 L T d.
constexpr double kFlopsPerToken =
    72.0 * 4 * kDim * kDim + 6.0 * kDim * kVocab + 12.0 * 4 * kBlock * kDim;

tensor::Tensor filled(const tensor::Shape& shape, std::uint64_t seed, float scale) {
  tensor::Tensor t = tensor::Tensor::empty(shape);
  Rng rng(seed, 1);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = scale * (2.0f * rng.uniform() - 1.0f);
  return t;
}

void set_rates(benchmark::State& state, double flops) {
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(kTokens),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GFLOP/s"] = benchmark::Counter(
      flops, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1000);
}

struct GptFixture {
  GptFixture() {
    nn::ModelSpec spec;
    spec.name = "gpt";
    model = nn::build_model(spec);
    model->init(1);
    ids = tensor::Tensor::empty({kBatch, kBlock});
    Rng rng(2, 1);
    for (std::int64_t i = 0; i < ids.numel(); ++i) {
      ids.data()[i] = static_cast<float>(static_cast<int>(rng.uniform() * 255.99f));
    }
    labels.resize(static_cast<std::size_t>(kTokens));
    for (std::size_t i = 0; i < labels.size(); ++i) {
      labels[i] = static_cast<std::int32_t>(ids.data()[(i + 1) % labels.size()]);
    }
  }
  void forward_backward() {
    const tensor::Tensor& logits = model->forward(ids, {});
    benchmark::DoNotOptimize(nn::softmax_cross_entropy(logits, labels, &dlogits));
    model->store().zero_grads();
    model->backward(dlogits);
  }
  std::unique_ptr<nn::Model> model;
  tensor::Tensor ids, dlogits;
  std::vector<std::int32_t> labels;
};

void BM_GptStep(benchmark::State& state) {
  set_compute_threads(static_cast<int>(state.range(0)));
  GptFixture gpt;
  std::vector<optim::Segment> segments;
  for (const auto& e : gpt.model->store().param_entries()) {
    segments.push_back({e.name, e.offset, e.numel, e.weight_decay});
  }
  optim::OptimizerConfig config;
  config.name = "adamw";
  config.beta2 = 0.95;
  config.weight_decay = 0.1;
  optim::Adam adamw(config, segments, /*decoupled=*/true);
  nn::ParamStore& store = gpt.model->store();
  for (auto _ : state) {
    gpt.forward_backward();
    adamw.step(store.params(), store.grads(), 1e-3);
  }
  set_rates(state, kFlopsPerToken * kTokens);
}

void BM_GptForwardBackward(benchmark::State& state) {
  set_compute_threads(static_cast<int>(state.range(0)));
  GptFixture gpt;
  for (auto _ : state) gpt.forward_backward();
  set_rates(state, kFlopsPerToken * kTokens);
}

void BM_AttentionCore(benchmark::State& state) {
  set_compute_threads(static_cast<int>(state.range(1)));
  const nn::AttentionDims dims{kBatch, kBlock, kHeads, kDim};
  const tensor::Tensor qkv = filled({kTokens, 3 * kDim}, 1, 2.0f);
  const tensor::Tensor dy = filled({kTokens, kDim}, 2, 1.0f);
  tensor::Tensor probs = tensor::Tensor::empty({kBatch, kHeads, kBlock, kBlock});
  tensor::Tensor y = tensor::Tensor::empty({kTokens, kDim});
  tensor::Tensor dqkv = tensor::Tensor::empty({kTokens, 3 * kDim});
  tensor::Tensor scratch;
  for (auto _ : state) {
    nn::causal_attention_forward(dims, state.range(0), qkv.data(), probs.data(), y.data());
    nn::causal_attention_backward(dims, state.range(0), qkv.data(), probs.data(), dy.data(),
                                  scratch, dqkv.data());
  }
  set_rates(state, 12.0 * kBlock * kDim * kTokens);
}

void run_layer(benchmark::State& state, nn::Layer& layer, const tensor::Shape& input_shape,
               double flops) {
  nn::ParamStore store;
  layer.declare(store);
  store.finalize();
  layer.bind(store);
  Rng rng(3, 1);
  layer.init(rng);
  const tensor::Tensor x = filled(input_shape, 4, 1.0f);
  const tensor::Tensor dy = filled(layer.output_shape(input_shape), 5, 1.0f);
  for (auto _ : state) {
    layer.forward(x, {});
    benchmark::DoNotOptimize(layer.backward(dy, true).data());
  }
  set_rates(state, flops);
}

void BM_LinearStep(benchmark::State& state) {
  set_compute_threads(1);
  const std::int64_t in = state.range(0), out = state.range(1);
  nn::Linear fc("fc", in, out, nn::InitKind::kNormal, 0.02f);
  run_layer(state, fc, {kBatch, kBlock, in}, 6.0 * in * out * kTokens);
}

void BM_LayerNormStep(benchmark::State& state) {
  set_compute_threads(1);
  nn::LayerNorm ln("ln", kDim);
  run_layer(state, ln, {kBatch, kBlock, kDim}, 20.0 * kDim * kTokens);
}

void BM_GeluStep(benchmark::State& state) {
  set_compute_threads(1);
  nn::Activation gelu("gelu", nn::ActivationKind::kGelu);
  run_layer(state, gelu, {kBatch, kBlock, 4 * kDim}, 0.0);
}

void BM_HeadStep(benchmark::State& state) {
  set_compute_threads(1);
  // The head over a store that holds only the table it is tied to.
  nn::Embedding embed("embed", kVocab, kBlock, kDim);
  nn::TiedOutputHead head("head", embed.token_weight_name(), kDim, kVocab);
  nn::ParamStore store;
  embed.declare(store);
  store.finalize();
  embed.bind(store);
  head.bind(store);
  const tensor::Tensor x = filled({kBatch, kBlock, kDim}, 4, 1.0f);
  const tensor::Tensor dy = filled({kBatch, kBlock, kVocab}, 5, 1.0f);
  for (auto _ : state) {
    head.forward(x, {});
    benchmark::DoNotOptimize(head.backward(dy, true).data());
  }
  set_rates(state, 6.0 * kDim * kVocab * kTokens);
}

void BM_LossStep(benchmark::State& state) {
  set_compute_threads(1);
  const tensor::Tensor logits = filled({kBatch, kBlock, kVocab}, 6, 3.0f);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(kTokens));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 256);
  tensor::Tensor dlogits;
  for (auto _ : state) {
    benchmark::DoNotOptimize(nn::softmax_cross_entropy(logits, labels, &dlogits));
  }
  set_rates(state, 0.0);
}

BENCHMARK(BM_GptStep)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->MinTime(3.0)->UseRealTime();
BENCHMARK(BM_GptForwardBackward)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->MinTime(3.0)
    ->UseRealTime();
BENCHMARK(BM_AttentionCore)
    ->Args({32, 1})
    ->Args({64, 1})
    ->Args({16, 1})
    ->Args({128, 1})
    ->Args({32, 2})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_LinearStep)
    ->Args({kDim, 3 * kDim})
    ->Args({kDim, kDim})
    ->Args({kDim, 4 * kDim})
    ->Args({4 * kDim, kDim})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_LayerNormStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GeluStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_HeadStep)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_LossStep)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
