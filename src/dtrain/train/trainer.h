// Trainer: one training run from a Config to a run folder, on one rank. It names no strategy: a
// Strategy (strategy.h), chosen by name from the registry (strategy_registry.h), does what
// differs between ways of training; the Trainer does what every strategy shares.
//
// A run folder holds
//   resolved.toml          the full configuration, every default filled in (re-readable)
//   metrics.jsonl          step / eval / epoch records (metrics.h)
//   summary.json           written at the end; "parallel" is the strategy's own part
//   trace.json             the first parallel.trace_steps steps as a Chrome trace (trace.h)
//   checkpoints/epoch-N.ckpt and checkpoints/latest
//
// One step is the strategy's (Strategy::step): this rank's share through forward and backward
// (local_gradients.h: the micro-batches of train.accumulate_steps, the injected straggler), the
// gradients or parameters combined with the other ranks as the strategy does it, the update.
// With several ranks every rank runs this Trainer on its own replica or part, with its own
// communicator; at construction the ranks check that config and parameter layout agree. Rank 0
// alone writes the run folder.
//
// Epochs: epoch e visits data::ShuffledSampler(N, seed).epoch_order(e); the strategy's
// data::SharePlan (batch_plan.h) says which samples each of this rank's steps takes: by default the
// global batch of train.batch_size split over the ranks, the last partial batch included (its loss
// is a mean over fewer samples, so those samples weigh a little more in that one update; every
// sample is seen once per epoch). Evaluation is sharded over the ranks when the strategy is
// collective, else rank 0 evaluates alone.
//
// Reproducibility: initialisation, shuffling and dropout all draw from counter-based streams of
// train.seed, so the same config and thread count give bitwise-identical losses and parameters,
// and a run resumed from a checkpoint continues exactly as the uninterrupted run would have.
//
// Timing: train_seconds counts the steps and the batch copy; evaluation, checkpoints and logging
// are excluded (as the peer measurements in ../shared/peers do), except where ranks evaluate
// alone while the others train on (async parameter servers).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/data/batch_plan.h"
#include "dtrain/nn/model.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/train/config.h"
#include "dtrain/train/local_gradients.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/strategy.h"
#include "dtrain/train/trace.h"

namespace dtrain::train {

// (sample_shape, classes) -> an uninitialised model, built or not (TrainerOptions::make_model).
using ModelFactory = std::function<std::unique_ptr<nn::Model>(const tensor::Shape& sample_shape,
                                                              std::int64_t classes)>;

struct TrainerOptions {
  std::string run_dir;      // created when missing
  bool resume = false;      // continue from run_dir/checkpoints/latest
  bool quiet = false;       // no progress output
  std::FILE* out = stderr;  // where progress goes
  // Data parallelism: this rank's communicator (null: one worker). It must outlive the Trainer.
  comm::Communicator* comm = nullptr;
  // Data already loaded (ranks that are threads share one copy); null: the Trainer loads it.
  std::shared_ptr<const RunData> data;
  // This rank's strategy, where its launcher builds it (a parameter-server worker gets its client
  // this way); null: the registry's for parallel.strategy.
  std::function<std::unique_ptr<Strategy>(const StrategyContext&)> make_strategy = nullptr;
  // A model built in code (a library user's own architecture: docs/LIBRARY.md, examples/cpp/):
  // called once per rank with one sample's shape and the data's class count, it returns the model
  // (Model::build() done or not: the Trainer builds it) for samples of that shape, uninitialised:
  // the Trainer calls init(train.seed), so every rank starts from the same parameters. Null:
  // nn::build_model for model.name. With a factory the [model] keys are not read, the run is
  // labelled "custom", the memory budget is not estimated beforehand (it is computed from a
  // ModelSpec), and run_training refuses it under the strategies that build their model from
  // model.name (StrategyInfo::takes_model_factory false: parameter_server, hogwild, ...).
  ModelFactory make_model = nullptr;
};

// nn::ModelSpec for `config` on data whose samples have `sample_shape`, with `classes` outputs.
nn::ModelSpec model_spec(const ModelSection& config, const tensor::Shape& sample_shape,
                         std::int64_t classes);
optim::OptimizerConfig optimizer_config(const OptimSection& config);
// The schedule of a run of `epochs` x `steps_per_epoch` steps: base_lr = optim.lr, global_batch =
// batch_size, warmup_epochs converted to steps, and for cosine decay total_steps = the steps after
// warmup (the run's last step is then one cosine step above min_lr; lr_schedule.h).
optim::ScheduleConfig schedule_config(const Config& config, std::int64_t steps_per_epoch);

class Trainer {
 public:
  // Loads the data, builds the model, the strategy (which may talk to the other ranks: broadcast,
  // parameter-server start), the optimizer and the schedule; nothing is written yet.
  Trainer(Config config, TrainerOptions options);
  ~Trainer();

  // Trains to config.train.epochs (from the checkpoint when resuming), writing the run folder.
  RunSummary run();

  const Config& config() const { return config_; }
  nn::Model& model() { return *model_; }
  const data::Dataset& train_data() const { return data_->train; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }

  // One step of the strategy at global step `step` on this rank's share (x, labels) of a global
  // batch of `global_count` samples (0: x.dim(0) x world_size(), equal shares); returns the
  // share's mean loss. `correct` receives the count of correctly classified samples of the share.
  float train_step(const tensor::Tensor& x, std::span<const std::int32_t> labels, std::int64_t step,
                   std::int64_t* correct, std::int64_t global_count = 0);

  struct Evaluation {
    double loss = 0.0;
    double accuracy = 0.0;
  };
  // Mean loss and accuracy over the whole test set, in eval mode (sharded over the ranks;
  // collective with several ranks; `alone`: this rank evaluates all of it, no collective).
  Evaluation evaluate(bool alone = false);

  // A warm standby's one forward and backward of a batch before it sleeps (standby.h), so that
  // the activations' pages and the GEMMs' buffers are in place when it takes over; the model's
  // buffers and gradients are restored after, and the parameters are never stepped. Only where the
  // strategy's forward and backward talk to no other rank (Strategy::forward_backward_is_local).
  // Also a fork server's warm-up of ranks that are threads (run_training, launch.cc).
  void warm_up_as_standby();

 private:
  void prepare_run_dir();
  // In a fork server's template (fork_server.h): the warm-up with the activations in the shared
  // scratch arena, then forks until the supervisor goes away; returns in each forked worker once
  // it is woken, with its compute pool started again.
  void serve_as_fork_template();

  Config config_;
  TrainerOptions options_;
  std::shared_ptr<const RunData> data_;
  int rank_ = 0;
  int world_ = 1;
  std::unique_ptr<nn::Model> model_;
  TraceRecorder trace_;
  std::unique_ptr<LocalGradients> local_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<data::SharePlan> plan_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  StepResult last_step_;
};

}  // namespace dtrain::train
