// Pipeline: pipeline parallelism (GPipe, Huang et al. 2019; PipeDream-flush / 1F1B, Narayanan et
// al. 2021) over parallel.workers = p ranks, one stage per rank.
//
// What it computes. The model's layer list is cut into p contiguous stages (pipeline.partition:
// equal layer counts, or balanced by measured layer time; nn/model_partition.h); rank s runs stage
// s. Each step's batch of B samples is cut into m = pipeline.micro_batches micro-batches
// [B k / m, B (k + 1) / m) that flow through the stages in the order of pipeline.schedule
// (parallel/pipeline/schedule.h): rank 0 feeds the inputs, activations go forward point to point,
// the last stage computes the loss against its labels, gradients come back. After the flush each
// rank's optimizer updates only its own layers' parameters (optimizer_segments()).
//
// What it equals. One worker with train.accumulate_steps = m: the same micro-batches, the same
// dropout streams (step m + k), the same loss weights (|micro-batch| / B), the backwards in the
// same order 0..m-1, so every parameter's gradient is the same sum in the same order: bitwise for
// models without tied weights (tests/train/pipeline_test.cc). A parameter used on two stages (the
// GPT's embedding, read again by its tied output head on the last stage) is owned by the stage of
// the layer that declares it: the other stage sends its part of the gradient there after the
// flush, the owner adds it and updates, and sends the new values back (Megatron-LM's embedding
// group does the same with an allreduce). That sum is in another order than the unsplit model's,
// so the GPT follows one worker to rounding (1e-6), not bitwise.
//
// Batch norm: each micro-batch is normalized with its own statistics, as GPipe does and as the
// unsplit model does with accumulation. By default the running statistics are updated once per
// micro-batch in micro-batch order on the stage that holds the layer (momentum applied m times per
// step), which is exactly what one worker with train.accumulate_steps = m does, so the evaluated
// model equals that one's. pipeline.deferred_batch_norm = true is torchgpipe's deferred batch norm
// (parallel/pipeline/deferred_batch_norm.h): one update per step from the statistics of all m
// micro-batches; the parameters stay the accumulation run's (docs/PIPELINE.md, "Batch norm").
//
// PipeDream (pipeline.schedule = "pipedream"): asynchronous 1F1B with weight stashing, no flush.
// Stage s keeps p - 1 - s micro-batches in flight across steps and updates its weights after every
// micro-batch's backward (the micro-batch's mean gradient, the step's learning rate: m updates per
// step). Micro-batch n (counted from the run's start) is forwarded and backwarded on stage s with
// the stage's weights after max(D, n - (p - 1 - s)) updates, D the micro-batches before the last
// drain; the forward stashes them, the backward swaps them in. Every stage drains (its pending
// backwards and updates) at each epoch's end, before evaluations and before checkpoints, so a
// checkpoint holds a consistent model and a resume continues bitwise. A tied parameter read again
// by the last stage (the GPT's head): the last stage sends its gradient part per micro-batch to
// the owner, which adds it before that micro-batch's update, and reads the owner's value as of the
// owner's previous step call (version max(D, t m - (p - 1)) in step t). Refused: a parameter
// borrowed by another stage, and the hybrid grid (config validation).
//
// Evaluation and checkpoints. Every rank builds the whole model (same seed), but trains only its
// stage. Before an evaluation or a checkpoint each stage broadcasts its slice of the parameters
// and buffers, so every rank holds the whole trained model and the Trainer's evaluation (sharded
// over the ranks) and checkpoint (written by rank 0) run unchanged: one model's bytes per
// evaluation, (p - 1)/p x 4N received per rank. The optimizer state is gathered to rank 0 in the
// one-worker layout, so a checkpoint resumes under any stage count, or one worker.
//
// Cost per step: m x (activation + gradient) bytes across each stage boundary (B x T x d x 4 x 2
// for a GPT cut between blocks), bubble (p - 1)/(m + p - 1) of each stage's step, and the
// activations of peak_in_flight micro-batches per stage (GPipe m, 1F1B at most p - s).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/model.h"
#include "dtrain/parallel/pipeline/deferred_batch_norm.h"
#include "dtrain/parallel/pipeline/executor.h"
#include "dtrain/parallel/pipeline/schedule.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

class Pipeline final : public Strategy {
 public:
  // Cuts the model (ConfigError naming both numbers when it has fewer layers than ranks) and
  // reserves this stage's activation slots. `cut_group`: the ranks whose layer timings decide a
  // balanced cut together (pipeline.partition = "balanced"): the hybrid grid's world, so that every
  // data replica and tensor rank cuts its pipeline alike; null: this pipeline's own ranks.
  explicit Pipeline(const StrategyContext& context, comm::Communicator* cut_group = nullptr);
  ~Pipeline() override;
  // Under the hybrid grid: this pipeline is replica `replica` of `replicas` on the data axis, and
  // its dropout streams are those of that data-parallel rank (accumulating the micro-batches).
  void set_data_replica(int replica, int replicas);

  std::string name() const override { return "pipeline"; }
  // This stage's layers' parameters.
  std::vector<optim::Segment> optimizer_segments() const override;
  // Every rank takes the whole batch (rank 0 reads its inputs, the last stage its labels).
  std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const override;
  // Rank 0 reports the step's loss and correct count (the last stage sends them); the other
  // ranks report 0, so the Trainer's sums over ranks count each sample once.
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  // PipeDream: drains (every stage's pending backwards and updates) at each epoch's end.
  double end_epoch() override;
  void before_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  bool reshards_checkpoints() const override { return true; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

  const std::vector<nn::LayerRange>& stages() const { return stages_; }

 private:
  class StageWork;
  // A parameter read on `user`'s stage and owned (declared) on `owner`'s.
  struct Tie {
    int entry = 0;
    int owner = 0;
    int user = 0;
  };
  // Every rank receives every other stage's parameters and buffers (collective).
  void gather_whole_model();
  // PipeDream: runs every stage's backwards still in flight with their updates (collective); a
  // no-op for the flush schedules.
  void drain();
  // PipeDream with a tied parameter: the per-micro-batch gradient parts (StageWork hooks), the
  // owner's values after each call, the borrower's receive of them.
  void tie_hooks();
  void sync_ties_after_call(bool drained);
  void receive_tied_values();
  // Activation slots this stage uses: the list's peak, or PipeDream's p - stage.
  int peak_slots() const;
  void trace_action(const parallel::pipeline::ActionSpan& span, std::int64_t step);

  comm::Communicator& comm_;
  int stage_;
  parallel::pipeline::ScheduleKind schedule_;
  int micro_batches_;
  std::vector<nn::LayerRange> stages_;
  // Per stage: its parameters [param_begin, param_end) and buffers [buffer_begin, buffer_end) in
  // the store's flat arrays (declared in layer order, so each stage's are contiguous).
  std::vector<std::int64_t> param_begin_, param_end_, buffer_begin_, buffer_end_;
  std::vector<Tie> ties_;
  std::vector<parallel::pipeline::Action> actions_;
  parallel::pipeline::StageExecutor executor_;
  std::unique_ptr<StageWork> work_;
  std::unique_ptr<parallel::pipeline::DeferredBatchNorm> deferred_bn_;  // deferred_batch_norm
  // PipeDream: the slots (p - stage), the micro-batches in flight, the drains so far.
  std::size_t pipedream_slots_ = 0;
  int carried_ = 0;
  std::int64_t drains_ = 0;
  std::int64_t pipedream_base_ = 0;  // micro-batches started by earlier steps
  struct TiedSend {
    std::vector<float> values;
    comm::PendingMessage message;
    std::int64_t number = 0;  // the micro-batch (gradient parts)
  };
  std::deque<TiedSend> tied_grad_sends_;   // the borrower's, until the owner surely took them
  std::deque<TiedSend> tied_value_sends_;  // the owner's
  int tied_values_pending_ = 0;            // value messages the borrower has not taken yet
  std::vector<float> tie_buffer_;
  // PipeDream's copies of tied parameters and their gradient parts held at once (the borrower's
  // unconfirmed gradient sends, up to m + p of V x d; the owner's receive buffer and value send):
  // summary.json's peak_tied_copy_bytes, beside the weight stashes.
  double peak_tied_copy_bytes_ = 0.0;
  void note_tied_copies();
  bool whole_model_current_ = true;  // false from a step until gather_whole_model()
  // Measured, from the second step on (the first touches every buffer for the first time).
  std::int64_t measured_steps_ = 0;
  double step_seconds_ = 0.0, compute_seconds_ = 0.0;
  std::int64_t bytes_sent_ = 0, bytes_received_ = 0;
  std::int64_t steps_ = 0;
};

}  // namespace dtrain::train
