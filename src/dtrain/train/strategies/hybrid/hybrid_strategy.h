// Hybrid: data parallelism around pipeline, tensor or spatial parallelism on a process grid of
// dp x sp x tp x pp ranks (parallel/process_grid.h; docs/HYBRID.md), as Megatron-LM and DeepSpeed
// combine the first two.
//
// What it computes. The grid is split from the run's communicator once. Each rank runs the inner
// strategy on its model-parallel group: Pipeline on its pipeline group (pp > 1), TensorParallel on
// its tensor group (tp > 1), Spatial on its spatial group (sp > 1: each image's rows split over
// the group, docs/SPATIAL.md; tp = pp = 1, anything else is refused), or one worker's step (dp
// only). The D = dp replicas (the model-
// parallel groups) each take their share [B d / D, B (d + 1) / D) of the global batch of B; the
// inner strategy weighs each micro-batch's loss gradient by |micro-batch| / B, so after the flush
// (or the backward) the sum over the data group of a stage's (a shard's) gradients is the global
// batch's gradient. The data group sums them right before the update (DataAxis: allreduce, or
// ZeRO-1's reduce-scatter, update of 1/D, allgather), then every replica's update is the same.
// tp > 1 together with pp > 1 is a pipeline of tensor-parallel stages: every rank builds its
// tensor rank's part of the split model (TensorParallel over its tensor group), and its pipeline
// group (the ranks of the same tensor rank and replica) cuts that split model into stages, so
// stage s of tensor rank t exchanges activations point to point with stages s +- 1 of the same
// tensor rank only. The layers' allreduces run inside the stage, on the tensor group (its ranks
// hold the same stage and run the same schedule, so they issue the same collectives in the same
// order). The boundary activations are whole (the split layers' outputs are whole and replicated
// on the tensor group), so each of the T pipelines sends the whole activation.
//
// What it equals. One worker on the same global batch, up to the order of the sums: the replicas'
// partial sums are added by the allreduce instead of one after the other (dp x pp), and the row-
// parallel sums split (dp x tp, tp x pp). Parameters follow one worker's to 1e-5 relative after K
// steps (tests/train/hybrid_test.cc), not bitwise. Dropout: replica d draws the streams of
// data-parallel rank d of D (accumulating the pipeline's m micro-batches), not one worker's.
//
// Batch norm: each replica updates its own running statistics during the steps; before every
// evaluation and checkpoint the data group replaces them by their mean over the replicas (one
// allreduce of the buffers). The update r <- (1 - mu) r + mu s is linear in r, so the mean taken
// then equals, to rounding, the mean taken after every step, at no per-step cost. Under dp x sp
// the spatial group's split batch norms normalize with the statistics of the replica's whole
// images (its share, all rows): those of data parallelism over D ranks, not of the global batch.
//
// Evaluation and checkpoints: the inner strategy's, within each replica (the whole model gathered
// to every rank of the model-parallel group; every replica holds the same), so the Trainer's
// evaluation and its checkpoint (written by rank 0) run unchanged. Checkpoints hold one worker's
// layout (the optimizer state of each stage or shard, the ZeRO-1 blocks assembled first), so a
// checkpoint of one grid resumes on the same grid, on another grid, or on one worker.
//
// Bytes each rank sends per step: the inner strategy's (pipeline: m x 4 (boundary activations
// forward + their gradients backward) + 16 for the loss on the last stage + tied weights; tensor:
// its allreduces, docs/TENSOR_PARALLEL.md; spatial: halo, gather and allreduces of the replica's
// share, docs/SPATIAL.md; tp x pp: both, the tensor part counting only the split
// layers of this rank's stage) + the data group's 2 (D-1)/D x 4 N_stage (ring), where
// N_stage is the floats this rank's optimizer segments cover; printed beside the measurement in
// summary.json.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/parallel/process_grid.h"
#include "dtrain/train/strategies/hybrid/data_axis.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

class Pipeline;
class Spatial;
class TensorParallel;

class Hybrid final : public Strategy {
 public:
  // Builds the grid (ConfigError naming the numbers when dp x tp x pp differs from the ranks) and
  // the inner strategy on its group.
  explicit Hybrid(const StrategyContext& context);
  ~Hybrid() override;

  std::string name() const override { return "hybrid"; }
  std::vector<optim::Segment> optimizer_segments() const override;
  // This replica's share of each global batch (the same for every rank of a replica).
  std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const override;
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  void before_evaluation() override;
  void after_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  bool reshards_checkpoints() const override { return true; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

  const parallel::ProcessGrid& grid() const { return *grid_; }
  // The formula's bytes this rank sends in a step whose replica share has `samples` samples:
  // {model-parallel group, data group}.
  double predicted_model_bytes(std::int64_t samples) const;
  double predicted_data_bytes() const { return axis_->predicted_step_bytes(); }

 private:
  DataAxisOptimizer& view(optim::Optimizer& optimizer);
  comm::Communicator& model_group();

  // The mean over the data group of the trained model's buffers (batch-norm running statistics),
  // in place: before every evaluation and checkpoint (docs/HYBRID.md).
  void average_buffers();
  // tp x pp: the model-group bytes of the tensor split's layers on this rank's stage.
  double predicted_stage_tensor_bytes(std::int64_t samples) const;

  std::unique_ptr<parallel::ProcessGrid> grid_;
  // tp > 1 with pp > 1: the tensor split (its split model, the gathers into the Trainer's model),
  // which inner_, the pipeline, cuts into stages; declared first so that it outlives inner_.
  std::unique_ptr<TensorParallel> stage_split_;
  std::unique_ptr<Strategy> inner_;
  TensorParallel* tensor_ = nullptr;  // inner_ when tp > 1 (pp = 1), stage_split_ with pp > 1
  Pipeline* pipeline_ = nullptr;      // inner_ when pp > 1
  Spatial* spatial_ = nullptr;        // inner_ when sp > 1 (tp = pp = 1)
  std::unique_ptr<DataAxis> axis_;
  nn::Model* trained_ = nullptr;  // the model this rank's optimizer updates (split or not)
  std::unique_ptr<DataAxisOptimizer> view_;
  // Per step, bytes sent: measured (communicator counters) and by the formula.
  std::int64_t steps_ = 0;
  double model_bytes_ = 0.0, model_bytes_predicted_ = 0.0;
  double data_bytes_ = 0.0, data_bytes_predicted_ = 0.0;
};

}  // namespace dtrain::train
