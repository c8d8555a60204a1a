// dtrain bench gemm: GFLOP/s of C = A B (row-major, no transposes) through tensor::gemm at the
// square shape of ../shared/peers/src/sgemm_bench.c and at the MLP's shapes, for each compute
// thread count; the limit the training benchmarks are judged against (docs/PERFORMANCE.md,
// "Bounds"). Each row is the median of `repeats` timed runs of enough calls to last about 0.2 s.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::experiments {

struct GemmBenchmarkRow {
  std::string shape;  // what the shape is ("MLP fc1 forward")
  std::int64_t m = 0, n = 0, k = 0;
  int threads = 0;
  double gflops = 0.0;
};

// ConfigError for a thread count below 1 or repeats below 1, before anything runs.
void check_gemm_benchmark(const std::vector<int>& thread_counts, int repeats);

// Rows in thread-count order, then shape order; `on_row` (when set) sees each as it is measured.
std::vector<GemmBenchmarkRow> run_gemm_benchmark(
    const std::vector<int>& thread_counts, int repeats,
    const std::function<void(const GemmBenchmarkRow&)>& on_row = {});

}  // namespace dtrain::experiments
