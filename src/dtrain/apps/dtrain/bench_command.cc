// dtrain bench: measured figures, printed as a table or as JSON rows.
//   dtrain bench train   training samples/s per model and thread count (train/train_benchmark.h)
//   dtrain bench gemm    tensor::gemm GFLOP/s at 1024^3 and at the training step's shapes
//   dtrain bench spatial 3x3 convolutions unsplit vs split along the image height over P ranks
//                        (experiments/spatial_benchmark.h), seed 003's table
//   dtrain bench compression  encode + decode time of each gradient codec beside memcpy
//   dtrain bench scaling training speedup over one worker, worker counts alternating in one
//                        process so that the host's noise cancels (train/scaling_benchmark.h)
//   dtrain bench collectives  time, algbw and busbw per collective x algorithm x P x size
//                        (comm/collective_benchmark.h), nccl-tests style, plus alpha-beta fits;
//                        under `mpirun -np N` over the mpi transport, printed by rank 0
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/experiments/collective_benchmark.h"
#include "dtrain/experiments/compression_benchmark.h"
#include "dtrain/experiments/gemm_benchmark.h"
#include "dtrain/experiments/scaling_benchmark.h"
#include "dtrain/experiments/spatial_benchmark.h"
#include "dtrain/experiments/train_benchmark.h"

namespace dtrain::apps {
namespace {

void run_bench_train(const experiments::TrainBenchmarkOptions& options, bool json) {
  bool header_printed = false;
  const auto rows =
      experiments::run_train_benchmark(options, [&](const experiments::TrainBenchmarkRow& row) {
        if (json) return;
        if (!header_printed) {
          fmt::print("{:<8} {:>7} {:>6} {:>10} {:>14} {:>22} {:>9} {:>10}\n", "model", "threads",
                     "batch", "params", "samples/s", "[min - max]", "step ms", "tokens/s");
          header_printed = true;
        }
        fmt::print("{:<8} {:>7} {:>6} {:>10} {:>14.0f} {:>22} {:>9.3f} {:>10}\n", row.model,
                   row.threads, row.batch, row.parameters, row.samples_per_second,
                   fmt::format("[{:.0f} - {:.0f}]", row.samples_per_second_min,
                               row.samples_per_second_max),
                   row.step_ms,
                   row.tokens_per_sample > 1
                       ? fmt::format("{:.0f}", row.samples_per_second *
                                                   static_cast<double>(row.tokens_per_sample))
                       : std::string("-"));
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
                   {"step_ms", row.step_ms},
                   {"tokens_per_second",
                    row.samples_per_second * static_cast<double>(row.tokens_per_sample)}});
  }
  fmt::print("{}\n", out.dump(2));
}

void run_bench_scaling(const std::string& config_path, const std::vector<std::string>& sets,
                       const experiments::ScalingBenchmarkOptions& options, bool json) {
  const train::Config config = train::load_config(config_path, sets);
  const bool hogwild = config.parallel.strategy == "hogwild";
  const char* unit = hogwild ? "updates/s" : "samples/s";
  experiments::check_scaling_benchmark(config, options);
  if (!json) {
    fmt::print(
        "# dtrain bench scaling: {} {} on {}, {}; {} rounds, each one phase per worker count ({}), "
        "alternating; speedup = median over rounds of the rate over the {}-worker rate of the "
        "same round\n",
        config.parallel.strategy, config.model.name, config.data.dataset,
        hogwild ? "threads without locks"
                : fmt::format("global batch {}, allreduce {}", config.train.batch_size,
                              config.parallel.allreduce),
        options.rounds, hogwild ? "one epoch" : fmt::format("{} steps", options.steps),
        options.workers.front());
    std::fflush(stdout);
  }
  // A round counter on a terminal only: a log should not fill with carriage returns.
  const bool counter = !json && isatty(fileno(stderr)) != 0;
  const auto rows = experiments::run_scaling_benchmark(config, options, [&](int round) {
    if (!counter) return;
    fmt::print(stderr, "\rround {}/{}", round + 1, options.rounds);
    if (round + 1 == options.rounds) fmt::print(stderr, "\n");
    std::fflush(stderr);
  });
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : rows) {
      out.push_back({{"bench", "scaling"},
                     {"strategy", row.strategy},
                     {"workers", row.workers},
                     {"rounds", row.rounds},
                     {"samples_per_phase", row.samples_per_phase},
                     {"rate", row.rate},
                     {"rate_unit", unit},
                     {"rate_min", row.rate_min},
                     {"rate_max", row.rate_max},
                     {"speedup", row.speedup},
                     {"speedup_min", row.speedup_min},
                     {"speedup_max", row.speedup_max},
                     {"efficiency", row.efficiency}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print("{:>7} {:>12} {:>24} {:>8} {:>16} {:>10}\n", "workers", unit, "[min - max]", "speedup",
             "[min - max]", "efficiency");
  for (const auto& row : rows) {
    fmt::print("{:>7} {:>12.0f} {:>24} {:>8.3f} {:>16} {:>10.3f}\n", row.workers, row.rate,
               fmt::format("[{:.0f} - {:.0f}]", row.rate_min, row.rate_max), row.speedup,
               fmt::format("[{:.2f} - {:.2f}]", row.speedup_min, row.speedup_max), row.efficiency);
  }
}

// The GEMM limit as a table (or JSON rows): experiments/gemm_benchmark.h.
void run_bench_gemm(const std::vector<int>& thread_counts, int repeats, bool json) {
  experiments::check_gemm_benchmark(thread_counts, repeats);  // before the table's header
  if (!json) {
    fmt::print("{:<30} {:>5} {:>5} {:>5} {:>7} {:>10}\n", "shape", "m", "n", "k", "threads",
               "GFLOP/s");
  }
  const auto rows = experiments::run_gemm_benchmark(
      thread_counts, repeats, [json](const experiments::GemmBenchmarkRow& row) {
        if (json) return;
        fmt::print("{:<30} {:>5} {:>5} {:>5} {:>7} {:>10.1f}\n", row.shape, row.m, row.n, row.k,
                   row.threads, row.gflops);
      });
  if (!json) return;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    out.push_back({{"bench", "gemm"},
                   {"shape", row.shape},
                   {"m", row.m},
                   {"n", row.n},
                   {"k", row.k},
                   {"threads", row.threads},
                   {"gflops", row.gflops}});
  }
  fmt::print("{}\n", out.dump(2));
}

// Codec cost on one core beside memcpy (experiments/compression_benchmark.h).
void run_bench_compression(const std::vector<std::string>& codecs, std::int64_t elements,
                           int repeats, bool json) {
  experiments::check_compression_benchmark(codecs, elements, repeats);
  if (!json) {
    fmt::print("{} elements ({:.1f} MiB) on one core; bound: memcpy of the same bytes\n", elements,
               static_cast<double>(elements) * 4.0 / (1 << 20));
    fmt::print("{:<14} {:>10} {:>10} {:>10} {:>12} {:>8} {:>10}\n", "codec", "encode ms",
               "decode ms", "total ms", "payload B", "ratio", "x memcpy");
  }
  const auto rows = experiments::run_compression_benchmark(
      codecs, elements, repeats, [json](const experiments::CompressionBenchmarkRow& row) {
        if (json) return;
        fmt::print("{:<14} {:>10.3f} {:>10.3f} {:>10.3f} {:>12.0f} {:>8.1f} {:>10.2f}\n", row.codec,
                   row.encode_ms, row.decode_ms, row.encode_ms + row.decode_ms, row.payload_bytes,
                   row.ratio, row.vs_memcpy);
      });
  if (!json) return;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    out.push_back({{"bench", "compression"},
                   {"codec", row.codec},
                   {"elements", row.elements},
                   {"encode_ms", row.encode_ms},
                   {"decode_ms", row.decode_ms},
                   {"payload_bytes", row.payload_bytes},
                   {"ratio", row.ratio},
                   {"vs_memcpy", row.vs_memcpy}});
  }
  fmt::print("{}\n", out.dump(2));
}

// "4", "4K", "4M", "1G" (binary multiples) -> bytes; ConfigError naming the flag otherwise.
std::int64_t parse_size(const std::string& text, std::string_view flag = "--sizes") {
  std::size_t used = 0;
  long long value = -1;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::int64_t scale = 1;
  const std::string suffix = text.substr(used);
  if (suffix == "K" || suffix == "k")
    scale = std::int64_t{1} << 10;
  else if (suffix == "M" || suffix == "m")
    scale = std::int64_t{1} << 20;
  else if (suffix == "G" || suffix == "g")
    scale = std::int64_t{1} << 30;
  else if (!suffix.empty())
    used = 0;
  if (used == 0 || value < 1) {
    throw ConfigError(fmt::format(
        "{}: '{}' is not a positive byte count; use e.g. 4,4K,4M,64M (K/M/G = 2^10/2^20/2^30)",
        flag, text));
  }
  return static_cast<std::int64_t>(value) * scale;
}

// nccl-tests-style table (or JSON rows), then the alpha-beta fit per (op, algorithm, P). Under
// mpi every process runs it and only rank 0 prints.
void run_bench_collectives(const experiments::CollectiveBenchmarkOptions& options, bool json) {
  experiments::validate_collective_benchmark_options(options);
  const bool printer = options.transport != "mpi" || comm::mpi_world_rank() == 0;
  if (!json && printer) {
    fmt::print(
        "# dtrain bench collectives: time per call = max over ranks; busbw factors: "
        "allreduce 2(P-1)/P, allgather/reduce_scatter/scatter/gather/alltoall (P-1)/P, "
        "broadcast/reduce 1\n");
    fmt::print("{:<15} {:<17} {:<9} {:>5} {:>12} {:>11} {:>5} {:>7} {:>11} {:>8} {:>8} {:>7}\n",
               "op", "algorithm", "transport", "ranks", "size(B)", "count", "type", "iters",
               "time(us)", "algbw", "busbw", "correct");
  }
  const auto rows = experiments::run_collective_benchmark(
      options, [&](const experiments::CollectiveBenchmarkRow& row) {
        if (json) return;
        fmt::print(
            "{:<15} {:<17} {:<9} {:>5} {:>12} {:>11} {:>5} {:>7} {:>11.2f} {:>8.3f} {:>8.3f} "
            "{:>7}\n",
            row.op, row.algorithm, row.transport, row.ranks, row.size, row.count, row.dtype,
            row.iterations, row.time_us, row.algbw, row.busbw, row.correct ? "yes" : "NO");
        std::fflush(stdout);
      });
  if (!printer) return;
  const auto fits = experiments::fit_alpha_beta(rows);
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const auto& row : rows) {
      out.push_back({{"bench", "collectives"},
                     {"op", row.op},
                     {"algorithm", row.algorithm},
                     {"transport", row.transport},
                     {"ranks", row.ranks},
                     {"size", row.size},
                     {"count", row.count},
                     {"dtype", row.dtype},
                     {"iterations", row.iterations},
                     {"time_us", row.time_us},
                     {"algbw", row.algbw},
                     {"busbw", row.busbw},
                     {"correct", row.correct}});
    }
    fmt::print("{}\n", out.dump(2));
    return;
  }
  fmt::print(
      "\n# alpha-beta fit, least squares of time(us) = alpha + beta x size(B) over the sizes\n");
  fmt::print("{:<15} {:<17} {:<9} {:>5} {:>6} {:>12} {:>14} {:>12}\n", "op", "algorithm",
             "transport", "ranks", "points", "alpha(us)", "beta(us/B)", "1/beta(GB/s)");
  for (const auto& fit : fits) {
    const double inverse = fit.beta_us_per_byte > 0 ? 1e-3 / fit.beta_us_per_byte : 0.0;
    fmt::print("{:<15} {:<17} {:<9} {:>5} {:>6} {:>12.3f} {:>14.4e} {:>12.3f}\n", fit.op,
               fit.algorithm, fit.transport, fit.ranks, fit.points, fit.alpha_us,
               fit.beta_us_per_byte, inverse);
  }
}

// Seed 003's spatial-parallelism table (experiments/spatial_benchmark.h).
void run_bench_spatial(const experiments::SpatialBenchmarkOptions& options, bool json) {
  experiments::check_spatial_benchmark(options);  // before the table's header
  const bool resnet = options.model == "resnet";
  if (!json && resnet) {
    fmt::print(
        "resnet width {}, {} block(s) per stage, batch {}, input to global pool; ranks are "
        "threads, one compute thread each; halo B: bytes rank 0 sent in a forward, measured\n",
        options.channels, options.layers, options.batch);
  } else if (!json) {
    fmt::print(
        "3x3 conv x {}, batch {}, {} channels; ranks are threads, one compute thread each; "
        "halo B: bytes an inner rank sends per layer and neighbour, forward\n",
        options.layers, options.batch, options.channels);
    fmt::print("{:>10} {:>5} {:>18} {:>18} {:>18} {:>18} {:>11} {:>11}\n", "resolution", "ranks",
               "forward ms (x)", "backward ms (x)", "fwd CPU ms (x)", "bwd CPU ms (x)",
               "fwd GFLOP/s", "halo B");
  }
  const auto rows = experiments::run_spatial_benchmark(
      options, [json, resnet](const experiments::SpatialBenchmarkRow& row) {
        if (json) return;
        fmt::print("{:>10} {:>5} {:>18} {:>18} {:>18} {:>18} {:>11.1f} {:>11.0f}\n",
                   fmt::format("{}x{}", row.resolution, row.resolution), row.ranks,
                   fmt::format("{:.2f} ({:.2f}x)", row.forward_ms, row.forward_speedup),
                   fmt::format("{:.2f} ({:.2f}x)", row.backward_ms, row.backward_speedup),
                   fmt::format("{:.2f} ({:.2f}x)", row.forward_cpu_ms, row.forward_cpu_speedup),
                   fmt::format("{:.2f} ({:.2f}x)", row.backward_cpu_ms, row.backward_cpu_speedup),
                   row.forward_gflops,
                   resnet ? row.halo_bytes_forward_rank0 : row.halo_bytes_per_layer);
      });
  if (!json) return;
  nlohmann::json out = nlohmann::json::array();
  for (const auto& row : rows) {
    out.push_back({{"bench", "spatial"},
                   {"resolution", row.resolution},
                   {"ranks", row.ranks},
                   {"forward_ms", row.forward_ms},
                   {"backward_ms", row.backward_ms},
                   {"forward_speedup", row.forward_speedup},
                   {"backward_speedup", row.backward_speedup},
                   {"forward_cpu_ms", row.forward_cpu_ms},
                   {"backward_cpu_ms", row.backward_cpu_ms},
                   {"forward_cpu_speedup", row.forward_cpu_speedup},
                   {"backward_cpu_speedup", row.backward_cpu_speedup},
                   {"forward_gflops", row.forward_gflops},
                   {"halo_bytes_per_layer_per_neighbour", row.halo_bytes_per_layer},
                   {"halo_bytes_forward_rank0", row.halo_bytes_forward_rank0}});
  }
  fmt::print("{}\n", out.dump(2));
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  struct Flags {
    experiments::TrainBenchmarkOptions train;
    experiments::ScalingBenchmarkOptions scaling;
    std::string scaling_config;
    std::vector<std::string> scaling_sets;
    std::vector<int> gemm_threads{1, 2};
    int gemm_repeats = 5;
    experiments::SpatialBenchmarkOptions spatial;
    CLI::App* spatial_cmd = nullptr;  // `dtrain bench spatial`, to see whether it was given
    experiments::CollectiveBenchmarkOptions collectives;
    std::vector<std::string> collective_sizes;
    std::string collective_segment;
    bool collective_no_pin = false;
    std::vector<std::string> codecs{"fp16",   "bf16",      "sign",         "qsgd:4",
                                    "qsgd:8", "topk:0.01", "randomk:0.01", "powersgd:2"};
    std::int64_t codec_elements = std::int64_t{1} << 20;
    int codec_repeats = 5;
    bool json = false;
  };
  auto flags = std::make_shared<Flags>();
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Measures speed: training samples/s (`dtrain bench train`), the speedup of more workers "
      "(`dtrain bench scaling`), GEMM GFLOP/s (`dtrain bench gemm`), gradient codecs' cost "
      "(`dtrain bench compression`) or collectives' bandwidth "
      "(`dtrain bench collectives`). Figures are medians of repeated runs; see "
      "docs/PERFORMANCE.md for the recorded ones and the peers' figures.");
  bench->require_subcommand(1);

  CLI::App* train_cmd = bench->add_subcommand(
      "train",
      "Training samples/s (forward, loss, backward, SGD-momentum step; data already in memory) "
      "for each model x thread count, using the trainer's own step.\n"
      "Example: dtrain bench train --models mlp,lenet5 --threads 1,2 --json");
  train_cmd
      ->add_option("--models", flags->train.models,
                   "model names (mlp, lenet5, resnet; gpt: the byte-level transformer on "
                   "fortunes, with --batch 32 as PyTorch's peer)")
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
      ->capture_default_str()
      ->check(at_least(1));
  train_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* scaling_cmd = bench->add_subcommand(
      "scaling",
      "Speedup of W workers over the first count, with every worker count training in this "
      "process in alternating phases (round r: each count in turn for --steps steps; a hogwild "
      "config: one epoch), so that the machine's changing load hits all counts alike; speedup "
      "= median over rounds of the same-round ratio. The config's data parallelism "
      "(parallel.strategy = \"data_parallel\": the trainer's own step, ranks as threads as in "
      "`dtrain train --workers W`) or Hogwild! threads.\n"
      "Examples:\n"
      "  dtrain bench scaling --config examples/fashion_mlp.toml --workers 1,2\n"
      "  dtrain bench scaling --config examples/hogwild_sparse.toml --workers 1,2 --rounds 30");
  scaling_cmd->add_option("--config,-c", flags->scaling_config, "TOML config to train")->required();
  scaling_cmd
      ->add_option("--set,-s", flags->scaling_sets,
                   "override one config key, e.g. --set parallel.allreduce=tree (repeatable)")
      ->type_name("KEY=VALUE");
  scaling_cmd
      ->add_option("--workers,-w", flags->scaling.workers,
                   "worker counts (ranks or threads); the first is the speedups' baseline")
      ->delimiter(',')
      ->capture_default_str();
  scaling_cmd->add_option("--rounds", flags->scaling.rounds, "rounds (medians over them)")
      ->capture_default_str();
  scaling_cmd->add_option("--steps", flags->scaling.steps, "allreduce: steps per phase")
      ->capture_default_str();
  scaling_cmd
      ->add_option("--warmup", flags->scaling.warmup_steps,
                   "allreduce: untimed steps per worker count first (hogwild: > 0 runs one "
                   "untimed epoch each)")
      ->capture_default_str();
  scaling_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* gemm_cmd = bench->add_subcommand(
      "gemm",
      "GFLOP/s of dtrain's GEMM (OpenBLAS sliced over the compute pool) at 1024^3, the "
      "shape of ../shared/peers/src/sgemm_bench.c, and at the MLP's shapes.");
  gemm_cmd->add_option("--threads", flags->gemm_threads, "compute thread counts")
      ->delimiter(',')
      ->capture_default_str();
  gemm_cmd->add_option("--repeats", flags->gemm_repeats, "timed repeats (median reported)")
      ->capture_default_str()
      ->check(at_least(1));
  gemm_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* spatial_cmd = flags->spatial_cmd = bench->add_subcommand(
      "spatial",
      "Forward and backward time of 3x3 convolutions unsplit on one rank and split along the "
      "image height over P rank threads (halo exchange; docs/SPATIAL.md), seed 003's table.\n"
      "Example: dtrain bench spatial --resolutions 64,256 --ranks 1,2");
  spatial_cmd->add_option("--resolutions", flags->spatial.resolutions, "image sizes R (R x R)")
      ->delimiter(',')
      ->capture_default_str();
  spatial_cmd->add_option("--ranks", flags->spatial.ranks, "rank counts, the first 1")
      ->delimiter(',')
      ->capture_default_str();
  spatial_cmd->add_option("--batch", flags->spatial.batch, "images per pass")
      ->capture_default_str();
  spatial_cmd->add_option("--channels", flags->spatial.channels, "channels in and out")
      ->capture_default_str();
  spatial_cmd
      ->add_option("--layers", flags->spatial.layers,
                   "3x3 convolutions in the stack (resnet: blocks per stage)")
      ->capture_default_str();
  spatial_cmd
      ->add_option("--model", flags->spatial.model,
                   "convs (the stack) or resnet (width --channels, through its global pool)")
      ->capture_default_str();
  spatial_cmd->add_option("--rounds", flags->spatial.rounds, "alternating rounds (median)")
      ->capture_default_str();
  spatial_cmd->add_option("--iterations", flags->spatial.iterations, "timed passes per round")
      ->capture_default_str();
  spatial_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* compression_cmd = bench->add_subcommand(
      "compression",
      "Encode and decode time of each gradient codec (docs/COMPRESSION.md) on one core, its "
      "payload and ratio, beside memcpy of the same buffer measured in the same run.\n"
      "Example: dtrain bench compression --codecs fp16,topk:0.01,powersgd:2 --elements 1048576");
  compression_cmd->add_option("--codecs", flags->codecs, "codec specs")
      ->delimiter(',')
      ->capture_default_str();
  compression_cmd
      ->add_option("--elements", flags->codec_elements, "gradient elements (default 2^20: 4 MiB)")
      ->capture_default_str();
  compression_cmd->add_option("--repeats", flags->codec_repeats, "timed repeats (median reported)")
      ->capture_default_str();
  compression_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  CLI::App* coll_cmd = bench->add_subcommand(
      "collectives",
      "Time per call, algbw and busbw (GB/s, nccl-tests' factors) of each collective x "
      "algorithm x ranks x size on one transport, with a correctness check per size and an "
      "alpha-beta fit per algorithm. Header check off; time = max over ranks.\n"
      "Example: dtrain bench collectives --op allreduce --algorithm ring --ranks 2 "
      "--sizes 4,4M,64M");
  coll_cmd
      ->add_option("--op", flags->collectives.ops,
                   "collectives to measure, comma-separated (default: all of them)")
      ->delimiter(',')
      ->capture_default_str();
  coll_cmd
      ->add_option("--algorithm", flags->collectives.algorithms,
                   "allreduce algorithms (default: every registered one that runs on the "
                   "transport; 'native', MPI's own, only on mpi)")
      ->delimiter(',');
  coll_cmd
      ->add_option("--transport", flags->collectives.transport,
                   "inproc (ranks are threads) or mpi (the processes of `mpirun -np N`; the "
                   "default when started by mpirun)")
      ->capture_default_str();
  coll_cmd->add_option("--segment", flags->collective_segment,
                       "largest message of pipelined algorithms, bytes with K/M/G (default 1M)");
  coll_cmd
      ->add_option("--ranks", flags->collectives.ranks,
                   "rank counts P (under mpi: the job's size, the default)")
      ->delimiter(',')
      ->capture_default_str();
  coll_cmd
      ->add_option("--sizes", flags->collective_sizes,
                   "bytes per rank, suffixes K/M/G (default 4 B .. 256M by powers of 4)")
      ->delimiter(',');
  coll_cmd->add_option("--iters", flags->collectives.iterations,
                       "timed calls per size (default: about 0.2 s, 5 .. 10000)");
  coll_cmd->add_option("--warmup", flags->collectives.warmup, "untimed calls per size")
      ->capture_default_str();
  coll_cmd->add_flag("--no-pin", flags->collective_no_pin,
                     "inproc: leave rank threads unbound (default: rank r runs on CPU r when the "
                     "ranks fit the CPUs, as mpirun binds processes to cores; DTRAIN_PIN_RANKS=1 "
                     "pins them anyway)");
  coll_cmd->add_flag("--json", flags->json, "print a JSON list of rows instead of a table");

  return Command{bench, [flags, train_cmd, scaling_cmd, gemm_cmd, compression_cmd, coll_cmd] {
                   if (compression_cmd->parsed()) {
                     run_bench_compression(flags->codecs, flags->codec_elements,
                                           flags->codec_repeats, flags->json);
                   }
                   for (int t : flags->train.threads) {
                     if (t < 1) throw ConfigError(fmt::format("--threads: {} is not >= 1", t));
                   }
                   if (train_cmd->parsed()) run_bench_train(flags->train, flags->json);
                   if (scaling_cmd->parsed()) {
                     run_bench_scaling(flags->scaling_config, flags->scaling_sets, flags->scaling,
                                       flags->json);
                   }
                   if (gemm_cmd->parsed())
                     run_bench_gemm(flags->gemm_threads, flags->gemm_repeats, flags->json);
                   if (flags->spatial_cmd->parsed()) run_bench_spatial(flags->spatial, flags->json);
                   if (coll_cmd->parsed()) {
                     if (!flags->collective_sizes.empty()) {
                       flags->collectives.sizes.clear();
                       for (const auto& text : flags->collective_sizes)
                         flags->collectives.sizes.push_back(parse_size(text));
                     }
                     if (coll_cmd->count("--iters") > 0 && flags->collectives.iterations < 1) {
                       throw ConfigError(
                           fmt::format("--iters: {} is not >= 1", flags->collectives.iterations));
                     }
                     flags->collectives.pin_ranks = !flags->collective_no_pin;
                     if (!flags->collective_segment.empty()) {
                       flags->collectives.segment_bytes = static_cast<std::size_t>(
                           parse_size(flags->collective_segment, "--segment"));
                     }
                     auto& collectives = flags->collectives;
                     if (coll_cmd->count("--transport") == 0 && comm::launched_by_mpirun()) {
                       collectives.transport = "mpi";
                     }
                     if (collectives.transport != "mpi") {
                       run_bench_collectives(collectives, flags->json);
                       return 0;
                     }
                     // Under MPI a rank that fails takes the job down at once (mpi_abort), so
                     // the others never wait for their deadlines.
                     try {
                       experiments::validate_collective_benchmark_options(collectives);
                       if (coll_cmd->count("--ranks") == 0) {
                         collectives.ranks = {comm::mpi_world_size()};
                       }
                       run_bench_collectives(collectives, flags->json);
                     } catch (const std::exception& e) {
                       fmt::print(stderr, "error: {}\n", e.what());
                       std::fflush(stderr);
                       comm::mpi_abort(1);
                     }
                   }
                   return 0;
                 }};
}

}  // namespace dtrain::apps
