// Optimizer updates (optim::Sgd with momentum, optim::Adam) over n parameters, with the parameter
// and gradient arrays placed at chosen offsets from a page (the optimizer places its state vectors
// a quarter page from them: optimizer.h, "Placement"); and the same SGD-momentum loop over three
// arrays at chosen distances within one block (BM_SgdLoopAtDistances), which shows the effect that
// placement avoids.
//
// Bytes per element: SGD with momentum reads p, g, v and writes p, v (20 B); Adam reads p, g, m,
// v and writes p, m, v (28 B). The bound is those bytes over the memory (or L2, for n that fit)
// bandwidth; the GB/s counter compares with ../shared/peers' memcpy figure.
//
// Why: on the development VM (AMD EPYC) rank 0's ZeRO-1 shard of the Fashion-MNIST MLP updated
// 1.5-2.5x slower than rank 1's equal shard, even on cache-hot data, and a copy of any one of its
// three arrays made it fast: an aliasing effect between streams at particular relative addresses
// (docs/PERFORMANCE.md). n: 12,544 (cache-hot, 1/8 of a shard), 134,661 (a ZeRO-1 shard of the
// MLP at P = 2), 269,322 (the whole MLP).
// Run: build/bench/optimizer_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "dtrain/optim/optimizer.h"

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

// Runs `name`'s update over n floats with params at page offset `param_offset` and gradients at
// page offset `grad_offset` of their own page-aligned blocks (bytes, multiples of 4).
void update(benchmark::State& state, const char* name) {
  const auto n = state.range(0);
  const auto param_offset = static_cast<std::size_t>(state.range(1));
  const auto grad_offset = static_cast<std::size_t>(state.range(2));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float) + 8192;
  const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
  std::unique_ptr<void, FreeDeleter> p_block(std::aligned_alloc(4096, rounded));
  std::unique_ptr<void, FreeDeleter> g_block(std::aligned_alloc(4096, rounded));
  auto* p = reinterpret_cast<float*>(static_cast<char*>(p_block.get()) + param_offset);
  auto* g = reinterpret_cast<float*>(static_cast<char*>(g_block.get()) + grad_offset);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = 1e-3f * static_cast<float>(i % 7);
    g[i] = 1e-4f * static_cast<float>(i % 5 + 1);
  }
  dtrain::optim::OptimizerConfig config;
  config.name = name;
  if (config.name == "sgd") config.momentum = 0.9;
  const auto optimizer = dtrain::optim::make_optimizer(config, {{"w", 0, n, true}});
  for (auto _ : state) {
    optimizer->step(p, g, 1e-6);
    benchmark::DoNotOptimize(p);
  }
  const double per_element = config.name == "sgd" ? 20.0 : 28.0;
  state.counters["GB/s"] = benchmark::Counter(per_element * static_cast<double>(n),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

void BM_SgdMomentum(benchmark::State& state) { update(state, "sgd"); }
void BM_Adam(benchmark::State& state) { update(state, "adam"); }

// {n, param page offset, grad page offset}: the offsets malloc gave training before placement
// (0xcf0, 0xd20), the same offset, staggered by 13 and 17 lines, and nn::ParamStore's placement
// (0, half a page).
void layouts(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {12544, 134661, 269322}) {
    for (auto [p, g] : {std::pair{0xcf0, 0xd20}, std::pair{0, 0}, std::pair{0, 0x340},
                        std::pair{0, 0x440}, std::pair{0x340, 0x880}, std::pair{0, 0x800}}) {
      b->Args({n, p, g});
    }
  }
}

BENCHMARK(BM_SgdMomentum)->Apply(layouts);
BENCHMARK(BM_Adam)->Apply(layouts);

// optim::Sgd's momentum loop (no weight decay) over p, g = p + grad_distance and
// v = p + state_distance bytes, all in one page-aligned block, so their relative addresses are
// exactly those given (the optimizer itself would move v).
void BM_SgdLoopAtDistances(benchmark::State& state) {
  const auto n = state.range(0);
  const auto grad_distance = static_cast<std::size_t>(state.range(1));
  const auto state_distance = static_cast<std::size_t>(state.range(2));
  const std::size_t page_offset = 0xdd0;  // rank 0's parameters in the traced run
  const std::size_t bytes = page_offset + state_distance + static_cast<std::size_t>(n) * 4 + 4096;
  std::unique_ptr<void, FreeDeleter> block(std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096));
  char* base = static_cast<char*>(block.get()) + page_offset;
  auto* p = reinterpret_cast<float*>(base);
  auto* g = reinterpret_cast<float*>(base + grad_distance);
  auto* v = reinterpret_cast<float*>(base + state_distance);
  for (std::int64_t i = 0; i < n; ++i) {
    p[i] = 1e-3f * static_cast<float>(i % 7);
    g[i] = 1e-4f * static_cast<float>(i % 5 + 1);
    v[i] = 0.0f;
  }
  for (auto _ : state) {
    for (std::int64_t i = 0; i < n; ++i) {
      const float vi = 0.9f * v[i] + g[i];
      v[i] = vi;
      p[i] -= 1e-6f * vi;
    }
    benchmark::DoNotOptimize(p);
    benchmark::ClobberMemory();
  }
  state.counters["GB/s"] = benchmark::Counter(20.0 * static_cast<double>(n),
                                              benchmark::Counter::kIsIterationInvariantRate,
                                              benchmark::Counter::kIs1000);
}

// {n, g - p, v - p}: rank 0's ZeRO-1 shard as malloc placed it (0x107030, 0x210140), one worker's
// (0x107030, 0x20e060), three equally spaced megabytes, and the placed layout (gradients half a
// page and state a quarter page from the parameters' page offset).
void distances(benchmark::internal::Benchmark* b) {
  for (std::int64_t n : {12544, 134661}) {
    for (auto [g, v] : {std::pair{0x107030, 0x210140}, std::pair{0x107030, 0x20e060},
                        std::pair{0x100000, 0x200000}, std::pair{0x100800, 0x200400}}) {
      b->Args({n, g, v});
    }
  }
}

BENCHMARK(BM_SgdLoopAtDistances)->Apply(distances);

}  // namespace
