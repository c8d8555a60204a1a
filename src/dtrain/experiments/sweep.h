// `dtrain sweep`: one training run per point of a grid of config values, and a table comparing
// them by the seeds' yardsticks: time per epoch, samples/s, speedup and scaling efficiency over the
// one-worker run, time to the accuracy targets, bytes moved per step.
//
// A grid is a list of axes, each a config key and its values ("parallel.workers" = 1, 2, 4); the
// runs are the cross product, in order (the last axis varies fastest). Each run writes its own run
// folder under the sweep's folder, named after its point
// ("parallel.workers=2,parallel.allreduce=ring").
//
// The axis "mode" (`dtrain sweep --modes`) names ways of training, each a bundle of keys, so that
// synchronous, backup-worker and asynchronous training compare under the same stragglers:
//   data_parallel   parallel.strategy = "data_parallel" (the old name allreduce works too)
//   sync            parameter servers, consistency bsp
//   backup=B        parameter servers, bsp, B backup workers
//   async           parameter servers, consistency async (async/K: pull every K steps)
//   ssp=S           parameter servers, consistency ssp with staleness S
//   local_sgd=H     local SGD averaging every H steps
//
// Speedup of a run = its samples/s / the samples/s of the run at the same point with
// parallel.workers = 1 (the first run of the grid when the grid has no such point); scaling
// efficiency = speedup / its number of ranks.
#pragma once

#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"

namespace dtrain::experiments {

struct SweepAxis {
  std::string key;                  // "section.key"
  std::vector<std::string> values;  // as --set would take them
};

struct SweepRow {
  std::vector<std::string> point;  // one value per axis
  int ranks = 1;
  double epoch_seconds = 0.0;  // training seconds per epoch
  double samples_per_second = 0.0;
  double speedup = 1.0;
  double efficiency = 1.0;
  nlohmann::json time_to_accuracy;  // summary.json's {"0.85": s or null}
  double bytes_per_step = 0.0;      // sent per rank and step
  double final_test_accuracy = 0.0;
  double step_median = 0.0;  // seconds (summary.json's step_seconds_median)
  double step_p99 = 0.0;
  std::string run_dir;
};

struct SweepResult {
  std::vector<SweepAxis> axes;
  std::vector<SweepRow> rows;  // the points that finished, in order
  // A point whose run failed stops the sweep: its name and its error (null when all finished).
  std::string failed_point;
  std::exception_ptr failure;
};

// Runs every point of `axes` on `base` (each point applied with --set semantics and validated
// before any run starts, so a bad value fails at once). on_row is called after each run.
SweepResult run_sweep(
    const train::Config& base, const std::vector<SweepAxis>& axes, const std::string& out_dir,
    const std::function<void(const SweepRow&, std::size_t index, std::size_t total)>& on_row = {});

// The table printed by `dtrain sweep`, one line per row.
std::string sweep_table(const SweepResult& result);
std::string sweep_csv(const SweepResult& result);
nlohmann::json sweep_json(const SweepResult& result);

// "parallel.workers=1,2,4" -> {"parallel.workers", {"1", "2", "4"}}; ConfigError when malformed.
SweepAxis parse_sweep_axis(const std::string& text);

inline constexpr const char* kModeAxis = "mode";
// The --set assignments of one value of the "mode" axis; ConfigError naming the accepted forms.
std::vector<std::string> mode_overrides(const std::string& mode);

}  // namespace dtrain::experiments
