// Trainer: one training run from a Config to a run folder.
//
// A run folder holds
//   resolved.toml          the full configuration, every default filled in (re-readable)
//   metrics.jsonl          step / eval / epoch records (metrics.h)
//   summary.json           written at the end
//   checkpoints/epoch-N.ckpt and checkpoints/latest
//
// One step (train_step) is, in order: forward, loss, zero the gradients, backward (which adds into
// the flat gradient buffer), then one optimizer update over the flat buffers. The gradients are
// zeroed after the forward, not before it, so that the 4P bytes of zeros do not push the
// parameters the forward reads out of the cache: the forward then reads what the last update (or
// allgather) just wrote, and backward adds into lines just zeroed (bench scaling, 2 x 30 rounds:
// one worker 2-3% more samples/s, two workers 3%; docs/PERFORMANCE.md). With
// train.accumulate_steps = k the batch is cut into k micro-batches, each forward + backward adding
// into the gradients (zeroed before the first backward), then one update.
//
// Data parallelism (TrainerOptions::comm set; docs/PARALLEL.md): every rank runs this Trainer on
// its own model replica. At construction the ranks check that config and parameter layout agree
// and take rank 0's parameters. Each step's global batch (train.batch_size samples of the epoch's
// shuffled order, the same on every rank) is split into P contiguous shares of sizes differing by
// at most one; each rank scales its loss gradient by share / batch so that the gradient SUM over
// ranks is the global batch's mean gradient, which parallel::GradientSynchronizer computes bucket
// by bucket during backward. A final batch with fewer samples than P x k is skipped by every rank
// alike (no rank ever waits for a batch that will not come). Evaluation is sharded over the ranks
// too. Rank 0 alone writes the run folder.
//
// Epochs: epoch e visits data::ShuffledSampler(N, seed).epoch_order(e) in batches of batch_size;
// the last partial batch (N % batch_size samples) is trained on too, so steps_per_epoch =
// ceil(N / batch_size). Its loss is a mean over fewer samples, so those samples weigh a little more
// in that one update; every sample is seen once per epoch.
//
// Reproducibility: initialisation, shuffling and dropout all draw from counter-based streams of
// train.seed, so the same config and thread count give bitwise-identical losses and parameters,
// and a run resumed from a checkpoint continues exactly as the uninterrupted run would have.
//
// Timing: train_seconds counts forward, loss, backward, update and the batch copy; evaluation,
// checkpoints and logging are excluded (as the peer measurements in ../shared/peers do).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/nn/model.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_synchronizer.h"
#include "dtrain/parallel/sync_batch_norm.h"
#include "dtrain/ps/client.h"
#include "dtrain/train/config.h"
#include "dtrain/train/fused_update_policy.h"
#include "dtrain/train/fusion_policy.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/overlap_policy.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/straggler.h"
#include "dtrain/train/trace.h"
#include "dtrain/train/zero_policy.h"

namespace dtrain::train {

struct TrainerOptions {
  std::string run_dir;      // created when missing
  bool resume = false;      // continue from run_dir/checkpoints/latest
  bool quiet = false;       // no progress output
  std::FILE* out = stderr;  // where progress goes
  // Data parallelism: this rank's communicator (null: one worker). It must outlive the Trainer.
  comm::Communicator* comm = nullptr;
  // Data already loaded (ranks that are threads share one copy); null: the Trainer loads it.
  std::shared_ptr<const RunData> data;
  // Parameter-server training (parallel.strategy = "ps", docs/PS.md): this worker's client, and
  // `comm` is then the workers' communicator (the servers are not in it). Must outlive the Trainer.
  ps::Client* ps = nullptr;
};

// Parameter-server training with consistency async or ssp hands out batches as tickets (server 0
// counts them), so that a fast worker trains on more of each epoch than a slow one: each ticket is
// `ps_local_batch` consecutive samples of the epoch's order, and an epoch has
// ceil(N / ps_local_batch) tickets.
std::int64_t ps_local_batch(const Config& config, std::int64_t workers);
std::int64_t ps_tickets_per_epoch(const Config& config, std::int64_t workers,
                                  std::int64_t train_samples);

// nn::ModelSpec for `config` on data whose samples have `sample_shape`, with `classes` outputs.
nn::ModelSpec model_spec(const ModelSection& config, const tensor::Shape& sample_shape,
                         std::int64_t classes);
optim::OptimizerConfig optimizer_config(const OptimSection& config);
// The schedule of a run of `epochs` x `steps_per_epoch` steps: base_lr = optim.lr, global_batch =
// batch_size, warmup_epochs converted to steps, and for cosine decay total_steps = the steps after
// warmup, so the last step of the run reaches min_lr.
optim::ScheduleConfig schedule_config(const Config& config, std::int64_t steps_per_epoch);

// Rank r's part of a global batch of `count` samples over P ranks: [count r / P, count (r + 1) /
// P), sizes differing by at most one.
struct RankShare {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};
inline RankShare rank_share(std::int64_t count, int rank, int ranks) {
  const std::int64_t begin = count * rank / ranks;
  return {begin, count * (rank + 1) / ranks - begin};
}

class Trainer {
 public:
  // Loads the data and builds the model, optimizer and schedule; nothing is written yet.
  Trainer(Config config, TrainerOptions options);
  ~Trainer();

  // Trains to config.train.epochs (from the checkpoint when resuming), writing the run folder.
  RunSummary run();

  const Config& config() const { return config_; }
  nn::Model& model() { return *model_; }
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  const data::Dataset& train_data() const { return data_->train; }
  int rank() const { return rank_; }
  int world_size() const { return world_; }
  // Null with one worker.
  const parallel::GradientSynchronizer* synchronizer() const { return sync_.get(); }

  // One optimizer step at global step `step` on this rank's share (x, labels) of a global batch of
  // `global_count` samples (0: labels.size() x world_size(), equal shares); returns the share's
  // mean loss. `correct` receives the count of correctly classified samples of the share.
  float train_step(const tensor::Tensor& x, std::span<const std::int32_t> labels, std::int64_t step,
                   std::int64_t* correct, std::int64_t global_count = 0);

  struct Evaluation {
    double loss = 0.0;
    double accuracy = 0.0;
  };
  // Mean loss and accuracy over the whole test set, in eval mode (sharded over the ranks;
  // collective when data-parallel; `alone`: this rank evaluates all of it, no collective).
  Evaluation evaluate(bool alone = false);

 private:
  // The loss of logits against labels (cross entropy, or mse against one-hot targets), writing
  // dlogits when not null.
  float compute_loss(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                     tensor::Tensor* dlogits);
  void prepare_run_dir();
  // Parameter servers: worker 0 puts its initial parameters, then every worker pulls them.
  void start_parameter_servers();
  // Parameter servers: this step's gradients to the servers, their parameters back (every step
  // but with async and pull_every > 1).
  void exchange_with_servers(std::int64_t step, std::int64_t local, std::int64_t global_count);
  // Async / ssp: the batches are tickets handed out by server 0 (ps_local_batch); true while the
  // run has more.
  bool ticketed() const;
  // ZeRO-1: the optimizer holds this rank's shard (parallel/optimizer_shards.h).
  bool sharded() const;
  // ZeRO-1 with the gradient sums formed inside the update (fused_update_policy.h).
  bool fused() const;
  // The optimizer state of the whole model (gathered over the ranks when sharded: collective).
  std::vector<optim::StateTensor> full_optimizer_state();
  // Seconds spent in the last train_step, split (see StepTimes).
  struct StepTimes {
    double total = 0.0;    // the whole step
    double waiting = 0.0;  // blocked on gradient allreduces after backward
    double comm = 0.0;     // bucket allreduces running (overlapped with compute or not)
  };

  Config config_;
  TrainerOptions options_;
  std::shared_ptr<const RunData> data_;
  int rank_ = 0;
  int world_ = 1;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::int64_t steps_per_epoch_ = 0;
  tensor::Tensor dlogits_;
  tensor::Tensor one_hot_;
  std::unique_ptr<parallel::GradientSynchronizer> sync_;
  OverlapDecision overlap_;    // parallel.overlap resolved for this host (overlap_policy.h)
  ZeroDecision zero_;          // parallel.zero_stage resolved for this run (zero_policy.h)
  FusedUpdateDecision fused_;  // parallel.fused_update resolved (fused_update_policy.h)
  FusionDecision fusion_;      // parallel.fusion_bytes resolved for this run (fusion_policy.h)
  std::unique_ptr<parallel::SyncBatchNormReducer> bn_reducer_;
  StepTimes last_step_;
  std::int64_t dropped_steps_ = 0;  // bsp with backup workers: this worker's late gradients
  StragglerSpec straggler_;
  TraceRecorder trace_;
};

}  // namespace dtrain::train
