// TensorParallel: tensor (operator) parallelism, Megatron-LM's (Shoeybi et al. 2019), over
// parallel.workers = P ranks that form one tensor-parallel group.
//
// Two splits (tensor_parallel.style): megatron for the GPT (below) and seed 003's all-gather form
// for the MLP (nn/model_mlp_tensor_parallel.h: each Linear's outputs split, activations
// all-gathered, their gradients all-reduced); a layer list (model.name = "layers") takes either
// for its Linears (auto: all-gather, as the MLP) and splits its attention and transformer blocks
// by heads (nn/layer_list_tensor_parallel.h); everything else here holds for all of them.
//
// What it computes. Every rank builds the whole GPT (same seed, the Trainer's model) and, from it,
// its part of the split model (nn/model_gpt_tensor_parallel.h): each transformer block's attention
// split by heads (qkv column-parallel, proj row-parallel), its MLP by hidden units (fc column-
// parallel, out row-parallel), embeddings, LayerNorms and the tied head replicated. Every rank
// takes the whole batch; each step runs the split model's forward and backward (one allreduce in
// forward and one in backward per attention and per MLP: the conjugate operators g and f), and
// each rank's optimizer updates its own part, replicated parameters included: their gradients are
// bitwise equal on every rank, so the replicas stay equal without an exchange.
//
// What it equals. One worker on the same batch: the same loss and the same gradients up to the
// order of the sums the row-parallel allreduces split (each output is sum_r x_r W_r^T instead of
// one GEMM over all inputs), so parameters follow one worker's to rounding (1e-5 relative after K
// steps; tests/train/tensor_parallel_test.cc), not bitwise.
//
// Evaluation and checkpoints. Before an evaluation or a checkpoint the ranks allgather the split
// tensors into the Trainer's whole model (one model's split bytes), so the Trainer's evaluation
// and checkpoint run unchanged; the optimizer state is gathered into one worker's layout the same
// way, so a checkpoint resumes on any rank count that divides the heads, or on one worker.
//
// Cost per step and rank of the GPT (ring allreduce, B T tokens, width d, L blocks): bytes sent
// 4 L x 2 (P-1)/P x 4 B T d (seed 003: twice (P-1)/P B d_i per allreduce); FLOPs 1/P of the
// blocks' plus the replicated embedding, LayerNorms and head; parameters
// V d + block d + 2 d + L (12 d^2 / P + 7 d / P + 6 d).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/layer_list_tensor_parallel.h"
#include "dtrain/nn/model_gpt_tensor_parallel.h"
#include "dtrain/nn/model_mlp_tensor_parallel.h"
#include "dtrain/parallel/comm_group.h"
#include "dtrain/train/local_gradients.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

class TensorParallel final : public Strategy {
 public:
  // Builds this rank's split model from the Trainer's (ConfigError naming the numbers when the
  // heads do not divide over the ranks, or the model is not a GPT).
  explicit TensorParallel(const StrategyContext& context);
  ~TensorParallel() override;

  std::string name() const override { return "tensor_parallel"; }
  // Every tensor of the split model (its store, not the Trainer's).
  std::vector<optim::Segment> optimizer_segments() const override;
  // Every rank takes the whole batch.
  std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const override;
  // Rank 0 reports the loss and correct count (every rank computes the same), the others 0, so
  // the Trainer's sums over ranks count each sample once.
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  void before_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  bool reshards_checkpoints() const override { return true; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

  // The split model (tests compare it with one worker's; the hybrid grid's pipeline of
  // tensor-parallel stages cuts it into stages).
  nn::Model& split_model() { return *split_.model; }
  const nn::Model& split_model() const { return *split_.model; }
  // Under the hybrid grid: this tensor group is replica `replica` of `replicas` on the data axis,
  // and draws the dropout streams of that data-parallel rank, (step a + j) D + d for its
  // accumulation step j of a (LocalGradients), instead of one worker's.
  void set_data_replica(int replica, int replicas);
  // The split model's parameters changed outside step() (a pipeline of tensor-parallel stages
  // trains it): the next before_evaluation() gathers them.
  void invalidate_whole_model() { whole_model_current_ = false; }
  // Optimizer state vectors in the split model's layout -> one worker's layout (collective over
  // the group: one allgather per split tensor); gathers the parameters first, as
  // before_evaluation().
  std::vector<optim::StateTensor> gather_state(const std::vector<optim::StateTensor>& split);
  // After the Trainer loaded a checkpoint into the unsplit model: slices its parameters into the
  // split model and returns `state` (one worker's layout) sliced into the split model's layout.
  std::vector<optim::StateTensor> slice_state(std::vector<optim::StateTensor> state,
                                              const std::string& path);
  // The formula's bytes one rank sends in a step of `samples` samples.
  double predicted_step_bytes(std::int64_t samples) const;

 private:
  // Writes every split tensor, whole, into `full` (the Trainer's flat layout), from `local` (the
  // split model's flat layout): collective (one allgather per split tensor).
  void gather_into(const float* local, float* full);
  // full (one worker's layout) -> local (this rank's parts).
  void slice_from(const float* full, float* local) const;
  // The communicator's allreduce and all-gather counts, summed.
  comm::OpStats collective_stats() const;

  comm::Communicator& comm_;
  parallel::CommGroup group_;
  nn::TensorParallelModel split_;
  std::unique_ptr<LocalGradients> local_;
  std::vector<float> gather_buffer_;
  bool whole_model_current_ = true;  // false from a step until gather_into()
  // Measured from the second step on (the first touches every buffer for the first time).
  std::int64_t steps_ = 0, measured_steps_ = 0;
  double step_seconds_ = 0.0, collective_seconds_ = 0.0;
  std::int64_t step_bytes_sent_ = 0;  // the steps' allreduce bytes, all steps
  double step_bytes_predicted_ = 0.0;
  std::int64_t step_collectives_ = 0;
};

}  // namespace dtrain::train
