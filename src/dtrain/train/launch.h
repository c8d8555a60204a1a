// Starts a training run on the ranks its config asks for: one Trainer per rank.
//
//   parallel.workers = 1, no MPI launcher   one Trainer on this thread (no communicator)
//   parallel.workers = W > 1                W ranks as threads of this process (inproc transport),
//                                           each with its own compute pool of train.threads threads
//                                           and one shared copy of the data
//
// Every rank's log lines carry "[rank r/P]"; the first rank to fail makes the others fail promptly
// (comm::spawn_ranks), and the error names the rank.
#pragma once

#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

// Rank 0's summary.
RunSummary run_training(const Config& config, const TrainerOptions& options);

}  // namespace dtrain::train
