// Starts a training run on the ranks its config asks for: one Trainer per rank.
//
//   parallel.strategy = "hogwild"          lock-free threads on one parameter vector
//   (hogwild_run.h) parallel.strategy = "ps"               workers and parameter servers
//   (ps_run.h): as threads
//                                          parallel.workers + parallel.servers ranks; under mpirun
//                                          the job's last parallel.servers ranks serve
//   started by mpirun / srun                W = parallel.workers ranks per process (mpi transport
//                                           for W = 1, hybrid threads x processes otherwise); a
//                                           failure prints its error and MPI_Aborts the job
//   parallel.workers = 1, no MPI launcher   one Trainer on this thread (no communicator)
//   parallel.workers = W > 1                W ranks as threads of this process (inproc transport),
//                                           each with its own compute pool of train.threads threads
//                                           and one shared copy of the data
//
// Every rank's log lines carry "[rank r/P]"; the first rank to fail makes the others fail promptly
// (comm::spawn_ranks), and the error names the rank.
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
