// dtrain bench: measured figures, printed as a table or as JSON rows.
//   dtrain bench train   training samples/s per model and thread count (train/train_benchmark.h)
//   dtrain bench gemm    tensor::gemm GFLOP/s at 1024^3 and at the training step's shapes
#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.h"
#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/tensor/gemm.h"
#include "dtrain/train/train_benchmark.h"

namespace dtrain::apps {
namespace {

void run_bench_train(const train::TrainBenchmarkOptions& options, bool json) {
  bool header_printed = false;
  const auto rows = train::run_train_benchmark(options, [&](const train::TrainBenchmarkRow& row) {
    if (json) return;
    if (!header_printed) {
      fmt::print("{:<8} {:>7} {:>6} {:>10} {:>14} {:>22} {:>9}\n", "model", "threads", "batch",
                 "params", "samples/s", "[min - max]", "step ms");
      header_printed = true;
    }
    fmt::print(
        "{:<8} {:>7} {:>6} {:>10} {:>14.0f} {:>22} {:>9.3f}\n", row.model, row.threads, row.batch,
        row.parameters, row.samples_per_second,
        fmt::format("[{:.0f} - {:.0f}]", row.samples_per_second_min, row.samples_per_second_max),
        row.step_ms);
    std::fflush(stdout);
  });
  if (!json) return;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    out.push_back({{"bench", "train"},
                   {"model", row.model},
                   {"threads", row.threads},
                   {"batch", row.batch},
                   {"parameters", row.parameters},
                   {"steps", row.steps},
                   {"repeats", row.repeats},
                   {"samples_per_second", row.samples_per_second},
                   {"samples_per_second_min", row.samples_per_second_min},
                   {"samples_per_second_max", row.samples_per_second_max},
                   {"step_ms", row.step_ms}});
  }
  fmt::print("{}\n", out.dump(2));
}

struct GemmShape {
  std::int64_t m, n, k;
  const char* what;
};

// GFLOP/s of C = A B (row-major, no transposes), median of `repeats` timed runs of enough calls to
// last about 0.2 s.
void run_bench_gemm(const std::vector<int>& thread_counts, int repeats, bool json) {
  const std::vector<GemmShape> shapes = {
      {1024, 1024, 1024, "square (peers' sgemm_bench)"},
      {128, 256, 784, "MLP fc1 forward"},
      {256, 784, 128, "MLP fc1 weight grad"},
      {128, 256, 256, "MLP fc2 forward"},
  };
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    fmt::print("{:<30} {:>5} {:>5} {:>5} {:>7} {:>10}\n", "shape", "m", "n", "k", "threads",
               "GFLOP/s");
  }
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
      const double gflops = rates[rates.size() / 2];
      if (json) {
        out.push_back({{"bench", "gemm"},
                       {"shape", s.what},
                       {"m", s.m},
                       {"n", s.n},
                       {"k", s.k},
                       {"threads", threads},
                       {"gflops", gflops}});
      } else {
        fmt::print("{:<30} {:>5} {:>5} {:>5} {:>7} {:>10.1f}\n", s.what, s.m, s.n, s.k, threads,
                   gflops);
      }
    }
  }
  if (json) fmt::print("{}\n", out.dump(2));
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  struct Flags {
    train::TrainBenchmarkOptions train;
    std::vector<int> gemm_threads{1, 2};
    int gemm_repeats = 5;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Measures speed: training samples/s (`dtrain bench train`) or GEMM GFLOP/s "
      "(`dtrain bench gemm`). Figures are medians of repeated runs; see "
      "docs/PERFORMANCE.md for the recorded ones and the peers' figures.");
  bench->require_subcommand(1);

  CLI::App* train_cmd = bench->add_subcommand(
      "train",
      "Training samples/s (forward, loss, backward, SGD-momentum step; data already in memory) "
      "for each model x thread count, using the trainer's own step.\n"
      "Example: dtrain bench train --models mlp,lenet5 --threads 1,2 --json");
  train_cmd->add_option("--models", flags->train.models, "model names (mlp, lenet5, resnet)")
      ->delimiter(',')
      ->capture_default_str();
  train_cmd->add_option("--threads", flags->train.threads, "compute thread counts")
      ->delimiter(',')
      ->capture_default_str();
  train_cmd->add_option("--batch", flags->train.batch, "samples per step")->capture_default_str();
  train_cmd->add_option("--steps", flags->train.steps, "timed steps per repeat")
      ->capture_default_str();
  train_cmd->add_option("--warmup", flags->train.warmup_steps, "untimed steps first")
      ->capture_default_str();
  train_cmd->add_option("--repeats", flags->train.repeats, "timed repeats (median reported)")
      ->capture_default_str();
  train_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* gemm_cmd = bench->add_subcommand(
      "gemm",
      "GFLOP/s of dtrain's GEMM (OpenBLAS sliced over the compute pool) at 1024^3, the "
      "shape of ../shared/peers/src/sgemm_bench.c, and at the MLP's shapes.");
  gemm_cmd->add_option("--threads", flags->gemm_threads, "compute thread counts")
      ->delimiter(',')
      ->capture_default_str();
  gemm_cmd->add_option("--repeats", flags->gemm_repeats, "timed repeats (median reported)")
      ->capture_default_str();
  gemm_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  return Command{bench, [flags, train_cmd, gemm_cmd] {
                   for (int t : flags->train.threads) {
                     if (t < 1) throw ConfigError(fmt::format("--threads: {} is not >= 1", t));
                   }
                   if (train_cmd->parsed()) run_bench_train(flags->train, flags->json);
                   if (gemm_cmd->parsed())
                     run_bench_gemm(flags->gemm_threads, flags->gemm_repeats, flags->json);
                   return 0;
                 }};
}

}  // namespace dtrain::apps
