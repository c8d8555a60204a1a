// A Hogwild! training run (parallel.strategy = "hogwild"; docs/HOGWILD.md): parallel.workers
// threads update one shared parameter vector without locks, training either
//   a sparse linear model  model.name "logistic" or "svm" on data.dataset "libsvm" or
//                          "sparse-synthetic", per-sample updates (parallel/hogwild.h), or
//   a dense model          model.name "mlp", "lenet5" or an image layer list without batch norm
//                          on the dense data sets, mini-batches of
//                          train.batch_size per thread step (parallel/hogwild_dense.h),
// into a run folder:
//   resolved.toml   the full configuration
//   metrics.jsonl   one {"kind":"epoch"} record per epoch: train and test loss and accuracy,
//                   updates/s (samples/s), the epoch's learning rate, per-thread counts and CPU s
//   summary.json    the usual summary; train_samples_per_second is updates/s over all epochs, and
//                   "parallel" holds the strategy, threads, median epoch updates/s, updates per
//                   CPU second and per-thread counts
//   checkpoints/    epoch-N.ckpt and latest (checkpoint_dir.h): the shared parameters after epoch
//                   N, taken once its threads joined (every train.checkpoint_every epochs and the
//                   last), so `dtrain train --resume` continues at epoch N + 1
//
// Keys that apply: optim.lr (with the [schedule] keys, counting one schedule step per epoch:
// schedule.decay = "step" with step_size = 1 and gamma = 0.9 is the per-epoch decay of Niu et
// al.), optim.weight_decay (L2; sparse: on the touched coordinates; mlp: not on biases),
// train.epochs, train.seed (initialisation, epoch orders), train.accuracy_targets (on test
// accuracy; on training accuracy when there is no test set). optim.name must be "sgd" with
// momentum 0; train.threads does not apply (each thread computes alone), nor does batch-size
// scaling. Plain SGD keeps no optimizer state, so a checkpoint is the parameters and the run's
// figures; a resumed run trains on from exactly those parameters, but Hogwild!'s races make its
// later epochs differ from the uninterrupted run's (docs/HOGWILD.md, "Checkpoints").
#pragma once

#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

RunSummary run_hogwild(const Config& config, const TrainerOptions& options);

}  // namespace dtrain::train
