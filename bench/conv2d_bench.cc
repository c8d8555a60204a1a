// nn::Conv2d forward and backward at LeNet-5's shapes (batch 128), 1 and 2 compute threads, beside
// the per-image baseline it replaces (im2col + one small GEMM per image, in the same run).
// Run: build/bench/conv2d_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/tensor/gemm.h"
#include "dtrain/tensor/im2col.h"

namespace {

using dtrain::nn::Conv2d;
using dtrain::tensor::Tensor;

struct Shape {
  std::int64_t channels, side, filters, padding;
};
// LeNet's conv1 (1 -> 6, 28x28, pad 2) and conv2 (6 -> 16, 14x14).
const Shape kShapes[] = {{1, 28, 6, 2}, {6, 14, 16, 0}};
constexpr std::int64_t kBatch = 128;
constexpr std::int64_t kKernel = 5;

Tensor random_tensor(const dtrain::tensor::Shape& shape, std::uint64_t seed) {
  Tensor t = Tensor::empty(shape);
  dtrain::Rng rng(seed);
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data()[i] = rng.uniform() - 0.5f;
  return t;
}

struct Fixture {
  explicit Fixture(const Shape& s)
      : conv("conv", s.channels, s.filters, kKernel, 1, s.padding),
        x(random_tensor({kBatch, s.channels, s.side, s.side}, 1)) {
    conv.declare(store);
    store.finalize();
    conv.bind(store);
    dtrain::Rng rng(2);
    conv.init(rng);
    dy = random_tensor(conv.output_shape(x.shape()), 3);
  }
  dtrain::nn::ParamStore store;
  Conv2d conv;
  Tensor x, dy;
};

void set_counters(benchmark::State& state, std::int64_t flops_per_iteration) {
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(flops_per_iteration),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
  state.counters["samples/s"] = benchmark::Counter(static_cast<double>(kBatch),
                                                   benchmark::Counter::kIsIterationInvariantRate);
}

std::int64_t conv_flops(const Shape& s, const Conv2d& conv) {
  const auto out = conv.output_shape({kBatch, s.channels, s.side, s.side});
  return 2 * kBatch * s.filters * out[2] * out[3] * s.channels * kKernel * kKernel;
}

// args: shape index, threads
void BM_Conv2dForward(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  dtrain::set_compute_threads(static_cast<int>(state.range(1)));
  Fixture f(s);
  const dtrain::nn::ForwardContext ctx;
  for (auto _ : state) benchmark::DoNotOptimize(f.conv.forward(f.x, ctx).data());
  set_counters(state, conv_flops(s, f.conv));
  dtrain::set_compute_threads(1);
}

// args: shape index, threads, need_input_grad
void BM_Conv2dBackward(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  dtrain::set_compute_threads(static_cast<int>(state.range(1)));
  const bool need_dx = state.range(2) != 0;
  Fixture f(s);
  f.conv.forward(f.x, dtrain::nn::ForwardContext{});
  for (auto _ : state) benchmark::DoNotOptimize(f.conv.backward(f.dy, need_dx).data());
  set_counters(state, conv_flops(s, f.conv) * (need_dx ? 2 : 1));
  dtrain::set_compute_threads(1);
}

// The baseline: per image, im2col then y_b (F, OH*OW) = W x cols_b, one thread.
void BM_Conv2dForwardPerImage(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  dtrain::set_compute_threads(1);
  Fixture f(s);
  const dtrain::tensor::ConvGeometry g{s.channels, s.side, s.side, kKernel, kKernel, 1, s.padding};
  std::vector<float> cols(static_cast<std::size_t>(g.col_rows() * g.col_cols()));
  Tensor y = Tensor::empty(f.conv.output_shape(f.x.shape()));
  const std::int64_t image = s.channels * s.side * s.side;
  const std::int64_t out_image = s.filters * g.col_cols();
  for (auto _ : state) {
    for (std::int64_t b = 0; b < kBatch; ++b) {
      dtrain::tensor::im2col(g, f.x.data() + b * image, cols.data());
      dtrain::tensor::gemm(dtrain::tensor::Trans::kNo, dtrain::tensor::Trans::kNo, s.filters,
                           g.col_cols(), g.col_rows(), 1.0f, f.conv.weight().data(), g.col_rows(),
                           cols.data(), g.col_cols(), 0.0f, y.data() + b * out_image, g.col_cols());
    }
    benchmark::DoNotOptimize(y.data());
  }
  set_counters(state, conv_flops(s, f.conv));
}

BENCHMARK(BM_Conv2dForward)->ArgsProduct({{0, 1}, {1, 2}})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Conv2dForwardPerImage)->Args({0})->Args({1})->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Conv2dBackward)->ArgsProduct({{0, 1}, {1, 2}, {0, 1}})->Unit(benchmark::kMicrosecond);

}  // namespace
