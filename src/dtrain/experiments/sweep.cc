#include "dtrain/experiments/sweep.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "dtrain/base/error.h"
#include "dtrain/base/split.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/straggler.h"
#include "dtrain/train/strategy_registry.h"

namespace dtrain::experiments {

// Written inside dtrain::train before the experiments left it; its names read unqualified here.
using namespace dtrain::train;  // NOLINT(google-build-using-namespace)
namespace {

namespace fs = std::filesystem;

std::vector<std::vector<std::string>> cross_product(const std::vector<SweepAxis>& axes) {
  std::vector<std::vector<std::string>> points{{}};
  for (const auto& axis : axes) {
    std::vector<std::vector<std::string>> next;
    for (const auto& point : points) {
      for (const auto& value : axis.values) {
        next.push_back(point);
        next.back().push_back(value);
      }
    }
    points = std::move(next);
  }
  return points;
}

std::string point_name(const std::vector<SweepAxis>& axes, const std::vector<std::string>& point) {
  std::string name;
  for (std::size_t i = 0; i < axes.size(); ++i) {
    name += fmt::format("{}{}={}", i == 0 ? "" : ",", axes[i].key, point[i]);
  }
  return name.empty() ? "base" : name;
}

// The ranks of a run as the launcher starts them (one process when sweeping): the strategy's
// thread ranks, which count parameter servers only when they are ranks of their own (not with
// parameter_server.colocate_servers).
int ranks_of(const Config& config) {
  const StrategyInfo& strategy = find_strategy(config.parallel.strategy);
  return strategy.thread_ranks ? strategy.thread_ranks(config)
                               : static_cast<int>(config.parallel.workers);
}

// The count after "name=" in a mode ("backup=2" -> 2); ConfigError when it is not one.
std::int64_t mode_count(const std::string& mode, std::size_t at) {
  const std::string digits = mode.substr(at);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) {
    throw ConfigError(
        fmt::format("sweep mode '{}' needs a count after '{}'", mode, mode.substr(0, at)));
  }
  return std::stoll(digits);
}

std::string tta_text(const nlohmann::json& value) {
  return value.is_null() ? "-" : fmt::format("{:.1f}", value.get<double>());
}

}  // namespace

SweepAxis parse_sweep_axis(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw ConfigError(fmt::format(
        "sweep axis '{}' must be KEY=V1,V2,... (for example parallel.workers=1,2,4)", text));
  }
  SweepAxis axis{text.substr(0, eq), split(std::string_view(text).substr(eq + 1), ',')};
  for (const auto& value : axis.values) {
    if (value.empty()) throw ConfigError(fmt::format("sweep axis '{}' has an empty value", text));
  }
  return axis;
}

std::vector<std::string> mode_overrides(const std::string& mode) {
  const std::vector<std::string> ps{"parallel.strategy=\"parameter_server\""};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), ps.begin(), ps.end());
    return more;
  };
  if (mode == "allreduce" || mode == "data_parallel") {
    return {"parallel.strategy=\"data_parallel\""};
  }
  if (mode == "sync")
    return with({"parameter_server.consistency=\"bsp\"", "parameter_server.backup_workers=0"});
  if (mode.rfind("backup=", 0) == 0) {
    return with({"parameter_server.consistency=\"bsp\"",
                 fmt::format("parameter_server.backup_workers={}", mode_count(mode, 7))});
  }
  if (mode == "async")
    return with({"parameter_server.consistency=\"async\"", "parameter_server.pull_every=1"});
  if (mode.rfind("async/", 0) == 0) {
    return with({"parameter_server.consistency=\"async\"",
                 fmt::format("parameter_server.pull_every={}", mode_count(mode, 6))});
  }
  if (mode.rfind("ssp=", 0) == 0) {
    return with({"parameter_server.consistency=\"ssp\"",
                 fmt::format("parameter_server.staleness={}", mode_count(mode, 4))});
  }
  if (mode.rfind("local_sgd=", 0) == 0) {
    return {"parallel.strategy=\"local_sgd\"",
            fmt::format("local_sgd.period={}", mode_count(mode, 10))};
  }
  if (mode.rfind("decentralized=", 0) == 0) {
    // The topology's name is checked by the key (its accepted names are listed there).
    return {"parallel.strategy=\"decentralized\"",
            fmt::format("decentralized.topology=\"{}\"", mode.substr(14))};
  }
  throw ConfigError(
      fmt::format("unknown sweep mode '{}'; choose data_parallel (or allreduce), sync, backup=B, "
                  "async, async/K (pull every K "
                  "steps), ssp=S, local_sgd=H or decentralized=TOPOLOGY",
                  mode));
}

SweepResult run_sweep(
    const Config& base, const std::vector<SweepAxis>& axes, const std::string& out_dir,
    const std::function<void(const SweepRow&, std::size_t, std::size_t)>& on_row) {
  const auto points = cross_product(axes);
  // Every point's config first: a typo in the last value must not surface after an hour of runs.
  std::vector<Config> configs;
  // Rows compare like for like: "auto" would shard the optimizer for ring rows only, so a sweep
  // runs data_parallel points replicated unless an axis names data_parallel.zero_stage.
  const bool zero_stage_swept = std::any_of(axes.begin(), axes.end(), [](const SweepAxis& axis) {
    return canonical_key(axis.key) == "data_parallel.zero_stage";
  });
  for (const auto& point : points) {
    Config config = base;
    try {
      for (std::size_t i = 0; i < axes.size(); ++i) {
        const std::string origin = fmt::format("the sweep axis {} = {}", axes[i].key, point[i]);
        if (axes[i].key == kModeAxis) {
          for (const auto& assignment : mode_overrides(point[i])) {
            apply_override(config, assignment, origin);
          }
        } else {
          apply_override(config, axes[i].key + "=" + point[i], origin);
        }
      }
      if (!zero_stage_swept && config.parallel.strategy == "data_parallel" &&
          config.data_parallel.zero_stage == "auto") {
        apply_override(config, "data_parallel.zero_stage=0", "the sweep's replicated optimizer");
      }
      validate(config);
      // Before any run: a point whose straggler names a missing rank would otherwise fail only
      // when its turn comes. Worker ranks: the threads of each process times the processes.
      const std::int64_t processes = comm::launched_by_mpirun() ? comm::mpi_world_size() : 1;
      check_straggler_rank(config.parallel.straggler, config.parallel.workers * processes);
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("sweep point {}: {}", point_name(axes, point), e.what()));
    }
    configs.push_back(config);
  }
  SweepResult result;
  result.axes = axes;
  for (std::size_t k = 0; k < points.size(); ++k) {
    TrainerOptions options;
    options.run_dir = (fs::path(out_dir) / point_name(axes, points[k])).string();
    options.quiet = true;
    RunSummary summary;
    try {
      summary = run_training(configs[k], options);
    } catch (const std::exception&) {
      // The finished points still count: the caller writes them before reporting this one.
      result.failed_point = point_name(axes, points[k]);
      result.failure = std::current_exception();
      break;
    }
    SweepRow row;
    row.point = points[k];
    // Under mpirun a run's ranks are each process's times the processes.
    row.ranks = ranks_of(configs[k]) * (comm::launched_by_mpirun() ? comm::mpi_world_size() : 1);
    row.epoch_seconds =
        summary.train_seconds /
        static_cast<double>(std::max<std::int64_t>(summary.epochs - summary.resumed_from_epoch, 1));
    row.samples_per_second = summary.train_samples_per_second;
    row.time_to_accuracy = summary.time_to_accuracy;
    row.final_test_accuracy = summary.final_test_accuracy;
    row.step_median = summary.step_seconds_median;
    row.step_p99 = summary.step_seconds_p99;
    if (!summary.parallel.is_null()) {
      row.bytes_per_step = summary.parallel.value("bytes_sent_per_rank_and_step", 0.0);
    }
    row.run_dir = options.run_dir;
    result.rows.push_back(std::move(row));
    if (on_row) on_row(result.rows.back(), k, points.size());
  }
  // Speedup against the one-worker run at the same point of the other axes.
  for (std::size_t k = 0; k < result.rows.size(); ++k) {
    const SweepRow* baseline = &result.rows.front();
    for (std::size_t j = 0; j < result.rows.size(); ++j) {
      if (configs[j].parallel.workers != 1) continue;
      bool same = true;
      for (std::size_t i = 0; i < axes.size(); ++i) {
        if (axes[i].key != "parallel.workers" && points[j][i] != points[k][i]) same = false;
      }
      if (same) {
        baseline = &result.rows[j];
        break;
      }
    }
    SweepRow& row = result.rows[k];
    row.speedup = row.samples_per_second / std::max(baseline->samples_per_second, 1e-9);
    row.efficiency = row.speedup / static_cast<double>(row.ranks);
  }
  return result;
}

std::string sweep_table(const SweepResult& result) {
  std::string header;
  for (const auto& axis : result.axes) {
    const auto dot = axis.key.find('.');
    header +=
        fmt::format("{:>18} ", dot == std::string::npos ? axis.key : axis.key.substr(dot + 1));
  }
  std::vector<std::string> targets;
  if (!result.rows.empty()) {
    for (const auto& [target, seconds] : result.rows.front().time_to_accuracy.items()) {
      targets.push_back(target);
    }
  }
  header += fmt::format("{:>6} {:>9} {:>11} {:>8} {:>6}", "ranks", "s/epoch", "samples/s",
                        "speedup", "eff");
  for (const auto& target : targets) header += fmt::format(" {:>8}", "tta " + target);
  header +=
      fmt::format(" {:>8} {:>8} {:>12} {:>8}\n", "step ms", "p99 ms", "bytes/step", "test acc");
  std::string text = header;
  for (const auto& row : result.rows) {
    for (const auto& value : row.point) text += fmt::format("{:>18} ", value);
    text += fmt::format("{:>6} {:>9.2f} {:>11.0f} {:>8.2f} {:>6.2f}", row.ranks, row.epoch_seconds,
                        row.samples_per_second, row.speedup, row.efficiency);
    for (const auto& target : targets) {
      text += fmt::format(" {:>8}", tta_text(row.time_to_accuracy.value(target, nlohmann::json())));
    }
    text += fmt::format(" {:>8.2f} {:>8.2f} {:>12.0f} {:>7.2f}%\n", 1e3 * row.step_median,
                        1e3 * row.step_p99, row.bytes_per_step, 100.0 * row.final_test_accuracy);
  }
  return text;
}

std::string sweep_csv(const SweepResult& result) {
  std::string text;
  for (const auto& axis : result.axes) text += axis.key + ",";
  text +=
      "ranks,epoch_seconds,samples_per_second,speedup,efficiency,time_to_accuracy,"
      "step_seconds_median,step_seconds_p99,bytes_per_step,final_test_accuracy,run_dir\n";
  for (const auto& row : result.rows) {
    for (const auto& value : row.point) text += value + ",";
    std::string tta;
    for (const auto& [target, seconds] : row.time_to_accuracy.items()) {
      tta += fmt::format("{}{}:{}", tta.empty() ? "" : " ", target, tta_text(seconds));
    }
    text += fmt::format("{},{:.4f},{:.1f},{:.4f},{:.4f},{},{:.6f},{:.6f},{:.0f},{:.4f},{}\n",
                        row.ranks, row.epoch_seconds, row.samples_per_second, row.speedup,
                        row.efficiency, tta, row.step_median, row.step_p99, row.bytes_per_step,
                        row.final_test_accuracy, row.run_dir);
  }
  return text;
}

nlohmann::json sweep_json(const SweepResult& result) {
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& row : result.rows) {
    nlohmann::json point = nlohmann::json::object();
    for (std::size_t i = 0; i < result.axes.size(); ++i) point[result.axes[i].key] = row.point[i];
    rows.push_back({{"point", point},
                    {"ranks", row.ranks},
                    {"epoch_seconds", row.epoch_seconds},
                    {"samples_per_second", row.samples_per_second},
                    {"speedup", row.speedup},
                    {"efficiency", row.efficiency},
                    {"time_to_accuracy", row.time_to_accuracy},
                    {"step_seconds_median", row.step_median},
                    {"step_seconds_p99", row.step_p99},
                    {"bytes_per_step", row.bytes_per_step},
                    {"final_test_accuracy", row.final_test_accuracy},
                    {"run_dir", row.run_dir}});
  }
  return rows;
}

}  // namespace dtrain::experiments
