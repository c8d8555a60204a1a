// DataAxis: data parallelism around a model-parallel group of the grid. The ranks of one data
// group (parallel/process_grid.h) hold the same pipeline stage or the same tensor shard, each
// having formed its gradients from its replica's share of the global batch (weighted by
// |share| / B, so that the sum over the group is the global batch's gradient). Before the update
// the group sums them:
//   plain    one ring allreduce per contiguous range of the parameters this rank updates (a
//            stage's are contiguous: one call of N_stage floats; a tensor shard's store is one):
//            2 (D-1)/D x 4 N_stage bytes sent per rank and step;
//   ZeRO-1   parallel::Zero1Reducer on the data group: the range reduce-scattered, this rank's
//            block of it updated (its optimizer holds 1/D of the stage's state), the parameters
//            all-gathered: the same bytes.
//
// DataAxisOptimizer is what the inner strategy (Pipeline, TensorParallel) calls as its optimizer:
// its step() is the exchange above around the Trainer's optimizer; its state() and load_state()
// speak the inner strategy's layout (the stage's or shard's whole state), assembling the ZeRO-1
// blocks with one allreduce of the expanded state (optimizer_shards.h), so the inner strategy's
// checkpoints (one worker's layout) hold the same bytes with or without ZeRO-1.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/nn/model.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_buckets.h"
#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::train {

class DataAxis {
 public:
  // `segments`: what the inner strategy's optimizer updates, offsets into `model`'s store (the
  // Trainer's model for a pipeline stage, the split model for a tensor shard). `zero1` shards the
  // update over the data group.
  DataAxis(comm::Communicator& data, nn::Model& model, std::vector<optim::Segment> segments,
           comm::CollectiveOptions options, bool zero1);
  ~DataAxis();

  // What the Trainer's optimizer is built over: `segments`, or this rank's ZeRO-1 block of them.
  std::vector<optim::Segment> update_segments() const;
  const std::vector<optim::Segment>& segments() const { return segments_; }
  bool zero1() const { return reducer_ != nullptr; }
  comm::Communicator& comm() { return data_; }
  // N_stage: the floats the data group sums each step.
  std::int64_t numel() const;
  // The formula's bytes each rank sends per step: 2 (D-1)/D x 4 N_stage.
  double predicted_step_bytes() const;

  // The exchange, then `optimizer`'s update (over update_segments()), then (ZeRO-1) the gather.
  void step(optim::Optimizer& optimizer, float* params, float* grads, double lr);
  // `optimizer`'s state (over update_segments()) in the layout of segments() (collective under
  // ZeRO-1), and back.
  std::vector<optim::StateTensor> whole_state(const optim::Optimizer& optimizer) const;
  std::vector<optim::StateTensor> own_state(const std::vector<optim::StateTensor>& whole) const;

 private:
  comm::Communicator& data_;
  nn::Model& model_;
  std::vector<optim::Segment> segments_;
  std::vector<parallel::GradientBucket> ranges_;  // contiguous ranges of segments_
  comm::CollectiveOptions options_;
  std::unique_ptr<parallel::GradientReducer> reducer_;  // ZeRO-1, or null
};

// The Trainer's optimizer as the inner strategy sees it (see the top of this file).
class DataAxisOptimizer final : public optim::Optimizer {
 public:
  DataAxisOptimizer(DataAxis& axis, optim::Optimizer& inner);
  const optim::Optimizer& inner() const { return inner_; }
  // `grads` is the inner strategy's gradient buffer (ParamStore::grads(), writable): the data
  // group sums into it in place.
  void step(float* params, const float* grads, double lr) override;
  std::vector<optim::StateTensor> state() const override;
  void load_state(const std::vector<optim::StateTensor>& state, std::int64_t steps) override;

 private:
  DataAxis& axis_;
  optim::Optimizer& inner_;
};

}  // namespace dtrain::train
