// GEMM throughput of tensor::gemm at the shapes of a training step and at 1024^3 (the shape of
// ../shared/peers/src/sgemm_bench.c, to compare with OpenBLAS's own figure).
// Run: build/bench/gemm_bench --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <vector>

#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/gemm.h"

namespace {

using dtrain::tensor::Trans;

void BM_Gemm(benchmark::State& state) {
  const auto m = state.range(0), n = state.range(1), k = state.range(2);
  dtrain::set_compute_threads(static_cast<int>(state.range(3)));
  std::vector<float> a(static_cast<std::size_t>(m * k), 0.5f), b(static_cast<std::size_t>(k * n), 0.25f),
      c(static_cast<std::size_t>(m * n));
  for (auto _ : state) {
    dtrain::tensor::gemm(Trans::kNo, Trans::kNo, m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f,
                         c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(2 * m * n * k),
                                                 benchmark::Counter::kIsIterationInvariantRate,
                                                 benchmark::Counter::kIs1000);
}

BENCHMARK(BM_Gemm)
    ->Args({1024, 1024, 1024, 1})
    ->Args({1024, 1024, 1024, 2})
    ->Args({128, 256, 784, 1})
    ->Args({128, 256, 784, 2})
    ->Args({256, 784, 128, 1})
    ->Args({128, 256, 256, 1})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
