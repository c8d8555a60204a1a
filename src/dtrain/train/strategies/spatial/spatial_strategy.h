// Spatial: spatial parallelism (seed 003; Jin, Ginsburg and Keutzer 2018) over parallel.workers =
// P ranks: every rank holds the whole model and every image of the batch, but computes only its
// horizontal band of each image's rows through the convolutional layers (nn/spatial_model.h).
//
// One step on rank r, batch B of images (C, H, W):
//   1. band = rows [r H / P, (r + 1) H / P) of every image;
//   2. forward: each split convolution (K x K, stride S, padding p) first trades boundary rows
//      with ranks r - 1 and r + 1 (halo exchange: p rows from above, max(0, K - p - S) from
//      below); each split batch norm allreduces its per-channel sums (2F + 1 doubles), so it
//      normalizes with the whole images' statistics; pools run on the band (their windows aligned
//      with the bands), residual blocks on the band with both branches split; a split global
//      average pool allreduces its band sums (B C floats) and the head runs on its output; else,
//      at the first layer the split does not handle, the bands are allgathered and the head
//      (flatten, fully connected) runs on every rank on the same values;
//   3. backward: the head's gradients are the whole gradients on every rank; the split layers'
//      gradients are this band's share, and each convolution sends its halo rows' input gradient
//      back to the neighbour that owns them (added there); batch norm allreduces 2F doubles;
//   4. one allreduce (sum) of the split layers' gradients, [0, split_params) of the flat buffer;
//   5. every rank runs the optimizer on the whole (replicated) model: the same update everywhere.
//
// What it equals. One worker on the same batch: the same loss and gradients up to the order of
// the sums (the weight gradients of a convolution are summed band by band), so the parameters
// follow one worker's to rounding (1e-5 relative after K steps), not bitwise.
//
// Bytes each rank sends per step (ring allreduce; n_r neighbours: 1 at the edges, 2 inside):
//   halo      sum over split convs  4 B C W ([r > 0] bottom + [r < P - 1] top)   forward, and
//             backward with top and bottom swapped (except for the model's first trainable layer)
//   gather    (P - 1) x 4 B C' h' W'                  (the bands at the gather, ring allgather;
//                                                     none when a global pool ends the split)
//   norm      ring(2F + 1 doubles) + ring(2F doubles) per split batch norm and micro-batch
//   pool      ring(B_m C floats) per split global average pool and micro-batch
//   gradients ring(split_params floats)                ring(n) = e (2n - |b_r| - |b_(r+1)|)
//                                                     = 2 (P - 1)/P n e when P divides n
// Compute per rank: the split layers' FLOPs / P (plus the halo rows' copies); the head replicated.
//
// On the process grid (hybrid.sp, --dp D --sp S; strategies/hybrid/) this strategy runs on its
// spatial group of S ranks, and its step takes that replica's share of the global batch; the
// optimizer it calls is the data axis's, which sums the gradients over the data group first.
//
// Evaluation and checkpoints use the Trainer's unsplit model: before either, the split model's
// parameters and batch-norm statistics are copied into it (the same layout, no communication).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/spatial_model.h"
#include "dtrain/parallel/comm_group.h"
#include "dtrain/train/local_gradients.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

// The bytes one rank sends in one step, by kind (see the header).
struct SpatialStepBytes {
  double halo = 0.0;
  double gather = 0.0;
  double allreduce = 0.0;  // batch norms' sums and the gradient allreduce
  double total() const { return halo + gather + allreduce; }
};

class Spatial final : public Strategy {
 public:
  // Splits the Trainer's model (ConfigError naming the numbers when it cannot be split over the
  // ranks: nn/spatial_model.h).
  explicit Spatial(const StrategyContext& context);
  ~Spatial() override;

  std::string name() const override { return "spatial"; }
  std::vector<optim::Segment> optimizer_segments() const override;
  // Every rank takes the whole batch (and computes its band of it).
  std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const override;
  // Rank 0 reports the loss and correct count (every rank computes the same), the others 0.
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  void before_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  bool reshards_checkpoints() const override { return true; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

  nn::Model& split_model() { return *split_.model; }
  // On the hybrid grid (dp x sp): this spatial group is data replica `replica` of `replicas`, and
  // draws the dropout masks of data-parallel rank `replica` of `replicas` (its share's samples),
  // not replica 0's.
  void set_data_replica(int replica, int replicas);
  // The formula's bytes this rank sends in a step of `samples` samples.
  SpatialStepBytes predicted_step_bytes(std::int64_t samples) const;

 private:
  // The communicator's counts of what a step sends, by kind.
  SpatialStepBytes sent_so_far() const;

  comm::Communicator& comm_;
  parallel::CommGroup group_;
  nn::SpatialSplit split_;
  std::unique_ptr<LocalGradients> local_;
  tensor::Tensor band_;
  int replicas_ = 1;                 // data replicas around this group (set_data_replica)
  bool whole_model_current_ = true;  // false from a step until before_evaluation()
  std::int64_t steps_ = 0, measured_steps_ = 0;
  double step_seconds_ = 0.0, comm_seconds_ = 0.0;
  SpatialStepBytes sent_, predicted_;  // sums over the steps
};

}  // namespace dtrain::train
