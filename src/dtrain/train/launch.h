// Starts a training run on the ranks its config asks for; the strategy's registry entry
// (strategy_registry.h) says what a rank runs.
//
// clang-format off
//   a strategy with run_whole (hogwild)    that function, on this process's threads
//   started by mpirun / srun               W = parallel.workers ranks per process (mpi transport
//                                          for W = 1, hybrid threads x processes otherwise); a
//                                          failure prints its error and MPI_Aborts the job
//   one rank, no MPI launcher              one Trainer on this thread (no communicator)
//   otherwise                              the strategy's thread_ranks (parallel.workers, or for
//                                          ps workers + servers) as threads of this process
//                                          (inproc transport), each with its own compute pool of
//                                          train.threads threads and one shared copy of the data
// clang-format on
//
// Each rank runs one Trainer with the strategy's `make`, or the strategy's own run_rank (ps: a
// rank serves or works, ps_run.h). Every rank's log lines carry "[rank r/P]"; the first rank to
// fail makes the others fail promptly (comm::spawn_ranks), and the error names the rank.
#pragma once

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

// Whether thread ranks are bound to CPUs (see launch.cc), and the communicator options (deadline,
// allreduce algorithm, stall warning, hierarchical groups) of a run of `config`: what
// run_training uses, and what `dtrain bench scaling` (scaling_benchmark.h) uses so that its ranks
// run as a training run's do.
comm::RankPinning rank_pinning(const Config& config);
comm::CommOptions comm_options(const Config& config);

// Rank 0's summary.
RunSummary run_training(const Config& config, const TrainerOptions& options);

}  // namespace dtrain::train
