// dtrain sweep: a grid of training runs and the table that compares them (train/sweep.h).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/experiments/step_time_model.h"
#include "dtrain/experiments/sweep.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/config.h"

namespace dtrain::apps {
namespace {

namespace fs = std::filesystem;

struct SweepFlags {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  std::string workers;
  std::string allreduce;
  std::string modes;
  std::string compression;
  std::string aggregator;
  std::string attack;
  std::int64_t byzantine = -1;
  std::string straggler;
  std::vector<std::string> grid;
  std::int64_t epochs = 0;
  bool json = false;
};

constexpr const char* kSweepHelp =
    R"(Trains one run per point of a grid of config values and compares them.

The grid's axes are --workers, --allreduce, --compression, --aggregator, --modes and any config key with --grid KEY=V1,V2,...; the runs
are their cross product, one after another, each in its own run folder under --out. The table gives
training seconds per epoch, samples/s, speedup and scaling efficiency over the one-worker run at the
same point, time to each accuracy target (training seconds), bytes sent per rank and step, and the
final test accuracy, and the median and 99th-percentile step time; --out also receives sweep.csv and
sweep.json. So that rows compare like for like, data_parallel.zero_stage = "auto" runs as 0
(optimizer replicated) in a sweep; --grid data_parallel.zero_stage=0,1 compares the two.

--modes compares ways of training under the same conditions (for example --straggler):
data_parallel (or allreduce), sync (parameter servers, bsp), backup=B (bsp using the first workers - B gradients),
async (Downpour; async/K pulls every K steps), ssp=S (staleness bound S; docs/PS.md) and
local_sgd=H (average the replicas every H steps; docs/LOCAL_SGD.md) and decentralized=TOPOLOGY
(each rank averages with its neighbours in ring, torus, exponential, one-peer-exponential or full
every step; docs/DECENTRALIZED.md).)";

constexpr const char* kSweepFooter = R"(
Examples:
  dtrain sweep --config examples/fashion_mlp.toml --workers 1,2 --allreduce ring,tree,parameter-server
  dtrain sweep --config examples/fashion_mlp.toml --workers 2 \
      --grid data_parallel.bucket_bytes=0,1048576 --grid data_parallel.overlap=true,false --epochs 1
  dtrain sweep --config examples/fashion_mlp_ps.toml --workers 3 --straggler rank=2,slowdown=3 \
      --modes data_parallel,sync,backup=1,async,ssp=3
  dtrain sweep --config examples/fashion_mlp.toml --workers 2 --modes data_parallel,local_sgd=4,local_sgd=16
  dtrain sweep --config examples/fashion_mlp.toml --workers 8 --epochs 2 \
      --modes data_parallel,decentralized=one-peer-exponential,decentralized=ring
  dtrain sweep --config examples/fashion_mlp.toml --workers 8 --epochs 2 \
      --aggregator mean,median,trimmed:0.25,krum,cclip --attack alie --byzantine 2)";

int run_sweep_command(const SweepFlags& flags) {
  std::vector<std::string> overrides = flags.sets;
  if (flags.epochs > 0) overrides.push_back(fmt::format("train.epochs={}", flags.epochs));
  if (!flags.straggler.empty()) {
    overrides.push_back(fmt::format("parallel.straggler=\"{}\"", flags.straggler));
  }
  // A --set may hold only together with an axis's values (worker momentum with --aggregator
  // median, byzantine = 2 with --workers 8). A file and --set values that are valid alone are
  // checked here, so that an error names the file or the --set; otherwise they are read without
  // the range and cross-key checks, and run_sweep checks each point before running any.
  train::Config base;
  try {
    base = train::load_config(flags.config, overrides);
  } catch (const ConfigError&) {
    base = train::load_config_unvalidated(flags.config, overrides);
  }
  // --attack and --byzantine hold for every run, but are checked per point (run_sweep validates
  // each): f < P depends on the --workers axis, which the config file's workers do not know.
  if (!flags.attack.empty()) {
    train::apply_override(base, fmt::format("data_parallel.attack=\"{}\"", flags.attack),
                          "--attack");
  }
  if (flags.byzantine >= 0) {
    train::apply_override(base, fmt::format("data_parallel.byzantine={}", flags.byzantine),
                          "--byzantine");
  }
  std::vector<experiments::SweepAxis> axes;
  if (!flags.workers.empty())
    axes.push_back(experiments::parse_sweep_axis("parallel.workers=" + flags.workers));
  if (!flags.allreduce.empty()) {
    axes.push_back(experiments::parse_sweep_axis("parallel.allreduce=" + flags.allreduce));
  }
  if (!flags.compression.empty()) {
    axes.push_back(experiments::parse_sweep_axis("data_parallel.compression=" + flags.compression));
  }
  if (!flags.aggregator.empty()) {
    axes.push_back(experiments::parse_sweep_axis("data_parallel.aggregator=" + flags.aggregator));
  }
  if (!flags.modes.empty()) {
    axes.push_back(
        experiments::parse_sweep_axis(std::string(experiments::kModeAxis) + "=" + flags.modes));
  }
  for (const auto& axis : flags.grid) axes.push_back(experiments::parse_sweep_axis(axis));
  if (axes.empty()) {
    throw ConfigError(
        "dtrain sweep needs at least one axis: --workers, --allreduce, --compression, "
        "--aggregator, --modes or --grid");
  }
  // Each run creates its folder under `out` (and so `out`) once every point's config has been
  // checked: a sweep refused up front leaves nothing behind.
  const std::string out = flags.out.empty() ? default_out_dir(flags.config, "sweep-") : flags.out;
  // Under mpirun every process runs every point (each run is collective); rank 0 reports, as it
  // alone writes the runs' summaries.
  const bool reporter = !comm::launched_by_mpirun() || comm::mpi_world_rank() == 0;
  const experiments::SweepResult result = experiments::run_sweep(
      base, axes, out, [&](const experiments::SweepRow& row, std::size_t index, std::size_t total) {
        if (!reporter) return;
        std::string point;
        for (std::size_t i = 0; i < axes.size(); ++i) {
          point += fmt::format("{}{}={}", i ? " " : "", axes[i].key, row.point[i]);
        }
        fmt::print(stderr, "[{}/{}] {}: {:.0f} samples/s, {:.2f} s/epoch, test accuracy {:.2f}%\n",
                   index + 1, total, point, row.samples_per_second, row.epoch_seconds,
                   100.0 * row.final_test_accuracy);
      });
  if (!result.rows.empty() && reporter) {
    train::write_file_atomically((fs::path(out) / "sweep.csv").string(),
                                 experiments::sweep_csv(result));
    train::write_file_atomically((fs::path(out) / "sweep.json").string(),
                                 experiments::sweep_json(result).dump(2) + "\n");
  }
  if (result.failure) {
    // The error keeps its kind (exit code); the message names the point and what was kept.
    const auto context = [&](const char* what) {
      return fmt::format("sweep point {}: {}; {}", result.failed_point, what,
                         result.rows.empty()
                             ? std::string("no point finished")
                             : fmt::format("the {} finished point(s) are in {}", result.rows.size(),
                                           (fs::path(out) / "sweep.csv").string()));
    };
    try {
      std::rethrow_exception(result.failure);
    } catch (const ConfigError& e) {
      throw ConfigError(context(e.what()));
    } catch (const DataError& e) {
      throw DataError(context(e.what()));
    } catch (const CheckpointError& e) {
      throw CheckpointError(context(e.what()));
    } catch (const ShapeError& e) {
      throw ShapeError(context(e.what()));
    } catch (const InternalError& e) {
      throw InternalError(context(e.what()));
    } catch (const Error& e) {
      throw Error(context(e.what()));
    } catch (const std::exception& e) {  // not dtrain's own: reported as internal (exit 3)
      throw InternalError(context(e.what()));
    }
  }
  // --compression: each codec's step time predicted beside the measured one (step_time_model.h).
  experiments::StepTimeReport predicted;
  if (!flags.compression.empty()) {
    predicted = experiments::predict_sweep_step_times(result);  // collective under mpirun
  }
  if (!reporter) return 0;
  if (!flags.compression.empty()) {
    train::write_file_atomically((fs::path(out) / "step_time_model.json").string(),
                                 experiments::step_time_json(predicted).dump(2) + "\n");
  }
  if (flags.json) {
    fmt::print("{}\n", experiments::sweep_json(result).dump(2));  // the model: its own file
  } else {
    fmt::print("{}", experiments::sweep_table(result));
    fmt::print("{}", experiments::step_time_table(predicted));
    fmt::print(stderr, "sweep.csv and sweep.json in {}\n", out);
  }
  return 0;
}

}  // namespace

Command add_sweep_command(CLI::App& app) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* sub = app.add_subcommand("sweep", kSweepHelp);
  sub->footer(kSweepFooter);
  sub->add_option("--config,-c", flags->config, "TOML config every run starts from")->required();
  sub->add_option("--set,-s", flags->sets, "override one config key for every run (repeatable)")
      ->type_name("KEY=VALUE");
  sub->add_option("--workers,-w", flags->workers, "axis: ranks as threads, e.g. 1,2,4")
      ->type_name("N,N,...");
  sub->add_option("--allreduce", flags->allreduce, "axis: allreduce algorithms, e.g. ring,tree")
      ->type_name("ALG,ALG,...");
  sub->add_option("--compression", flags->compression,
                  "axis: gradient codecs, e.g. none,fp16,topk:0.01,powersgd:2 "
                  "(docs/COMPRESSION.md)")
      ->type_name("CODEC,CODEC,...");
  sub->add_option("--aggregator", flags->aggregator,
                  "axis: robust aggregators, e.g. mean,median,trimmed:0.2,krum,cclip "
                  "(docs/ROBUST.md; bucket:S,AGG holds a comma: give it with --set)")
      ->type_name("AGG,AGG,...");
  sub->add_option("--attack", flags->attack,
                  "for every run: what the last --byzantine ranks do (alie, signflip, ...)")
      ->type_name("SPEC");
  sub->add_option("--byzantine", flags->byzantine,
                  "for every run: f, the number of Byzantine ranks (the last f)")
      ->check(at_least(0));
  sub->add_option("--modes", flags->modes,
                  "axis: ways of training, e.g. data_parallel,sync,backup=1,async,ssp=3");
  sub->add_option("--straggler", flags->straggler,
                  "for every run: rank=R,slowdown=S, rank=R,delay_ms=D or "
                  "random=exp|pareto,mean_ms=M")
      ->type_name("SPEC");
  sub->add_option("--grid,-g", flags->grid, "axis: any config key and its values (repeatable)")
      ->type_name("KEY=V1,V2,...");
  sub->add_option("--epochs", flags->epochs, "shortcut for --set train.epochs=N")
      ->check(at_least(1));
  sub->add_option("--out,-o", flags->out, "sweep folder (default runs/sweep-<config>-<time>)")
      ->check(non_empty_path());
  sub->add_flag("--json", flags->json, "print the rows as JSON instead of a table");
  return Command{sub, [flags] { return run_sweep_command(*flags); }};
}

}  // namespace dtrain::apps
