#include "dtrain/experiments/gemm_benchmark.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::experiments {
namespace {

struct GemmShape {
  std::int64_t m, n, k;
  const char* what;
};

}  // namespace

void check_gemm_benchmark(const std::vector<int>& thread_counts, int repeats) {
  for (int t : thread_counts) {
    if (t < 1) throw ConfigError(fmt::format("bench gemm: --threads {} is not >= 1", t));
  }
  if (repeats < 1) throw ConfigError(fmt::format("bench gemm: --repeats {} is not >= 1", repeats));
}

std::vector<GemmBenchmarkRow> run_gemm_benchmark(
    const std::vector<int>& thread_counts, int repeats,
    const std::function<void(const GemmBenchmarkRow&)>& on_row) {
  check_gemm_benchmark(thread_counts, repeats);
  const std::vector<GemmShape> shapes = {
      {1024, 1024, 1024, "square (peers' sgemm_bench)"},
      {128, 256, 784, "MLP fc1 forward"},
      {256, 784, 128, "MLP fc1 weight grad"},
      {128, 256, 256, "MLP fc2 forward"},
  };
  std::vector<GemmBenchmarkRow> rows;
  for (int threads : thread_counts) {
    set_compute_threads(threads);
    for (const auto& s : shapes) {
      std::vector<float> a(static_cast<std::size_t>(s.m * s.k), 0.5f);
      std::vector<float> b(static_cast<std::size_t>(s.k * s.n), 0.25f);
      std::vector<float> c(static_cast<std::size_t>(s.m * s.n), 0.0f);
      auto call = [&] {
        tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, s.m, s.n, s.k, 1.0f, a.data(), s.k,
                     b.data(), s.n, 0.0f, c.data(), s.n);
      };
      for (int i = 0; i < 3; ++i) call();
      const double flops = 2.0 * static_cast<double>(s.m * s.n * s.k);
      Stopwatch probe;
      call();
      const auto calls = std::max<std::int64_t>(
          1, static_cast<std::int64_t>(0.2 / std::max(probe.seconds(), 1e-9)));
      std::vector<double> rates;
      for (int r = 0; r < repeats; ++r) {
        Stopwatch watch;
        for (std::int64_t i = 0; i < calls; ++i) call();
        rates.push_back(flops * static_cast<double>(calls) / watch.seconds() / 1e9);
      }
      std::sort(rates.begin(), rates.end());
      rows.push_back({s.what, s.m, s.n, s.k, threads, rates[rates.size() / 2]});
      if (on_row) on_row(rows.back());
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
