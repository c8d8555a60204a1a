// Strategy: what differs between ways of training, behind one interface, so that the training
// loop (trainer.h) names none of them.
//
// The Trainer owns what every strategy shares: the data and the epochs' sample orders, the
// learning-rate schedule, evaluation and time to accuracy, metrics, progress, checkpoint files and
// the run folder. A Strategy owns, for one rank:
//   - setup: what the ranks agree on before the first step (data parallelism broadcasts rank 0's
//     parameters, parameter servers put and pull them), done in its constructor;
//   - which parameters this rank's optimizer updates (ZeRO-1: its shard);
//   - which samples this rank trains on each step (share_plan(): rank shares of a global batch, or
//     parameter-server tickets);
//   - one training step from this rank's share of the batch to updated parameters (step());
//   - how evaluation runs where that differs (async parameter servers: worker 0 alone, on the
//     servers' parameters);
//   - its part of a checkpoint (which optimizer state is sharded, replicated or per rank, and how
//     it is restored), or none;
//   - its lines in the run banner, the "parallel" object of summary.json, and its trace events.
//
// A strategy is chosen once per run by name (parallel.strategy) from the registry
// (strategy_registry.h), as Megatron-LM's get_forward_backward_func chooses a schedule, never by
// `if`s inside the loop. Adding one: docs/ARCHITECTURE.md, "Adding a strategy".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/data/batch_plan.h"
#include "dtrain/nn/model.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/tensor/tensor.h"
#include "dtrain/train/config.h"
#include "dtrain/train/local_gradients.h"
#include "dtrain/train/trace.h"

namespace dtrain::train {

// What a strategy works with on its rank; the Trainer owns all of it and outlives the strategy.
struct StrategyContext {
  const Config& config;
  nn::Model& model;
  // This rank's communicator among the training ranks; null with one worker.
  comm::Communicator* comm = nullptr;
  int rank = 0;
  int world = 1;
  TraceRecorder& trace;
  // The forward and backward passes of this rank's share, which every replica strategy runs.
  LocalGradients& local;
};

// One step's input: this rank's share (x, labels) of a batch whose mean gradient the step follows
// (`global_count` samples: the share's gradient is weighted by x.dim(0) / global_count; labels:
// x.dim(0) x the data set's labels_per_sample).
struct StepInput {
  const tensor::Tensor& x;
  std::span<const std::int32_t> labels;
  std::int64_t step = 0;
  std::int64_t global_count = 0;
  double lr = 0.0;
};

struct StepResult {
  float loss = 0.0f;         // the share's mean loss
  std::int64_t correct = 0;  // correctly classified samples of the share
  double waiting = 0.0;      // seconds blocked on other ranks (or servers)
  double comm = 0.0;         // seconds communication ran, overlapped with compute or not
};

// What the Trainer measured over a run, for the strategy's part of summary.json.
struct RunTotalsView {
  std::int64_t steps = 0;  // steps this run took (after a resume: since it)
  // One row per rank (samples, seconds, compute / communication / waiting split, bytes sent and
  // received); collective when the strategy is collective().
  std::function<nlohmann::json()> per_rank_rows;
};

// context.comm, or InternalError naming `strategy` when the run has none (a launcher bug: the
// registry builds strategies that talk to other ranks only for runs with a communicator).
comm::Communicator& required_communicator(const StrategyContext& context,
                                          std::string_view strategy);

class Strategy {
 public:
  explicit Strategy(const StrategyContext& context) : context_(context) {}
  virtual ~Strategy() = default;
  Strategy(const Strategy&) = delete;
  Strategy& operator=(const Strategy&) = delete;

  // The parallel.strategy name, for logs and summary.json.
  virtual std::string name() const = 0;

  // The parameter ranges this rank's optimizer updates; by default every parameter tensor.
  virtual std::vector<optim::Segment> optimizer_segments() const;

  // How this rank draws its samples (steps per epoch, the share of each step).
  virtual std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const;

  // Whether the ranks meet in collectives outside the step: epoch-end evaluation sharded over the
  // ranks, epoch sums, per-rank rows and the trace. False for ranks that never wait for each
  // other (async parameter servers): rank 0 then evaluates alone.
  virtual bool collective() const { return true; }

  // One step: this rank's share through forward and backward (context.local), gradients combined
  // as the strategy does it, parameters updated by `optimizer`.
  virtual StepResult step(const StepInput& input, optim::Optimizer& optimizer) = 0;

  // After the epoch's last step, on every rank, before its evaluation and checkpoint (local SGD
  // averages the replicas there); returns the seconds it spent communicating.
  virtual double end_epoch() { return 0.0; }

  // Called around every evaluation, on the ranks that evaluate (collective when collective()):
  // parameter servers fetch the servers' parameters when the worker's own copy may be stale; local
  // SGD evaluates the replicas' average mid-epoch and restores each replica after.
  virtual void before_evaluation() {}
  virtual void after_evaluation() {}
  // Whether this rank's forward and backward of a batch talk to no other rank (a warm standby
  // runs one before it sleeps: standby.h). False where a layer communicates (tensor split,
  // synchronized batch norm, pipeline stages) or unknown.
  virtual bool forward_backward_is_local() const { return false; }

  // Whether checkpoints are written; a strategy without them refuses --resume itself.
  virtual bool keeps_checkpoints() const { return true; }
  // The optimizer state as a checkpoint stores it; called on every rank (it may be collective:
  // ZeRO-1 gathers its shards), only rank 0 writes the result.
  virtual std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer);
  // Whether a checkpoint written on P ranks resumes on another number of ranks: true where
  // checkpoint_state() stores one worker's layout (the whole model's parameters and optimizer
  // state, whatever the sharding: ZeRO-1's shards are re-cut by restore_state), false where it
  // keeps state per rank (replicas that differ).
  virtual bool reshards_checkpoints() const { return false; }
  // Whether a checkpoint may be taken between two steps of an epoch (checkpoints on a clock, a
  // stop on SIGTERM) and resume exactly there.
  virtual bool checkpoints_mid_epoch() const { return true; }
  // Whether the step just run left a state a checkpoint holds whole; false where the strategy
  // keeps step state of its own that a checkpoint does not (local SGD's replicas between two
  // averages). A checkpoint or stop due at another step waits for the next step where it is true,
  // or the epoch's end. The same on every rank after the same step.
  virtual bool can_checkpoint_now() const { return true; }
  // Restores what checkpoint_state() stored (`state`), on every rank. `path` names the file.
  virtual void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                             optim::Optimizer& optimizer, const std::string& path);

  // Lines for the run banner (what runs, with the reasons for automatic choices).
  virtual std::vector<std::string> describe() const { return {}; }
  // summary.json's "parallel" object; null leaves it out. Called on every rank (collective when
  // collective()), after finish().
  virtual nlohmann::json summary(const RunTotalsView& totals) {
    (void)totals;
    return nullptr;
  }
  // After the last step, on every rank: release what the strategy started (parameter servers).
  virtual void finish(bool writer) { (void)writer; }

 protected:
  StrategyContext context_;
};

}  // namespace dtrain::train
