// Speedup over one worker, measured so that the host's noise cancels: `dtrain bench scaling`.
//
// Separate runs per worker count (what `dtrain sweep` and scripts/compare_ddp.sh do) see the
// machine in different states: on a shared VM the same 2-worker run varies by up to 20% from one
// minute to the next (docs/PERFORMANCE.md), more than most changes of ours. Here every worker
// count trains in the same process, in short alternating phases, so that each round's phases run
// within a fraction of a second of each other; the speedup of a worker count is the median over
// rounds of its rate over the baseline's rate in the same round.
//
//   parallel.strategy = "data_parallel" max(workers) rank threads, as `dtrain train --workers W`
//                                     starts them (same pinning, communicator options and shared
//                                     data). Each worker count W has its own Trainer per rank: W =
//                                     1 a plain one on rank 0, W > 1 one per rank r < W over a
//                                     communicator of the first W ranks. A phase is `steps` steps
//                                     of the global batch (train.batch_size) of the config, each
//                                     rank gathering its share of the epoch's shuffled order and
//                                     running Trainer::train_step, timed as a run's step clock
//                                     times (load batch + step). Ranks with no part in a phase
//                                     sleep in a barrier. Rate: samples / slowest rank's phase.
//   parallel.strategy = "hogwild"     one engine per thread count over one copy of the data
//                                     (hogwild_engine.h); a phase is one epoch, at the learning
//                                     rate of the run's schedule for that round. Rate: updates/s.
//
// Round r runs the worker counts in the given order when r is even and in reverse when odd, so
// that neither always runs first. Before round 0 every worker count runs `warmup_steps` untimed
// steps (hogwild: one untimed epoch).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/train/config.h"

namespace dtrain::experiments {

struct ScalingBenchmarkOptions {
  std::vector<int> workers{1, 2};  // the first is the baseline of the speedups
  int rounds = 20;
  std::int64_t steps = 100;  // allreduce: steps per phase
  std::int64_t warmup_steps = 20;
};

struct ScalingBenchmarkRow {
  std::string strategy;  // "data_parallel", "local_sgd" or "hogwild"
  int workers = 1;
  int rounds = 0;
  std::int64_t samples_per_phase = 0;  // samples (updates) each timed phase processes
  double rate = 0.0;                   // samples (hogwild: updates) per second, median over rounds
  double rate_min = 0.0;
  double rate_max = 0.0;
  double speedup = 0.0;  // median over rounds of rate / the baseline's rate in the same round
  double speedup_min = 0.0;
  double speedup_max = 0.0;
  double efficiency = 0.0;  // speedup x baseline workers / workers
};

// ConfigError for a strategy other than allreduce or hogwild, an empty, repeated or non-positive
// worker list, rounds or steps < 1, negative warmup, or a start under mpirun (the ranks here are
// threads); run_scaling_benchmark checks this first too.
void check_scaling_benchmark(const train::Config& config, const ScalingBenchmarkOptions& options);

// One row per worker count, in the order given. on_round (when set) is called after each round
// with its index, for progress output.
std::vector<ScalingBenchmarkRow> run_scaling_benchmark(
    const train::Config& config, const ScalingBenchmarkOptions& options,
    const std::function<void(int round)>& on_round = {});

}  // namespace dtrain::experiments
