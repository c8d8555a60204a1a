// Deferred batch norm (torchgpipe's DeferredBatchNorm, Kim et al. 2020) for a pipeline stage: each
// micro-batch is still normalized with its own statistics (what GPipe does, and what one worker
// does with train.accumulate_steps = m), but the running statistics are updated once per
// mini-batch, from the statistics of all its m micro-batches together:
//
//   n    = sum over the micro-batches of their values per channel
//   mean = (sum over the micro-batches of sum x) / n
//   var  = (sum over the micro-batches of sum x^2) / n - mean^2          (biased)
//   running_mean = (1 - momentum) running_mean + momentum mean
//   running_var  = (1 - momentum) running_var  + momentum var n / (n - 1)  (unbiased)
//
// the same formula, in the same double arithmetic, as nn::BatchNorm's forward applies to one
// batch (nn/batch_norm.h), so a BatchNorm layer fed the whole mini-batch at once ends with the same
// running statistics up to the order of the double sums
// (tests/parallel/deferred_batch_norm_test.cc: within 1e-6; m = 1 is bitwise the plain layer).
// Momentum is applied once per mini-batch instead of m times.
//
// Built from nn::BatchNorm's statistics hook (set_reducer): a recording reducer per layer adds each
// micro-batch's sums (sum x, sum x^2, count, in double) and changes nothing, so forward and
// backward stay exactly the plain layer's; begin() saves the running statistics, end() puts them
// back and applies the one update. A layer that already had a reducer (a synchronized batch norm)
// keeps it: the recorder calls it first and records the reduced sums.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/model.h"

namespace dtrain::parallel::pipeline {

class DeferredBatchNorm {
 public:
  // Every BatchNorm (residual blocks' included) of layers [range.begin, range.end) of `model`.
  // Install before Model::reserve_slots, whose replicas copy the layers' reducers. The destructor
  // gives every slot's layers back their own reducer, so `model` must outlive this object.
  DeferredBatchNorm(nn::Model& model, nn::LayerRange range);
  ~DeferredBatchNorm();
  DeferredBatchNorm(const DeferredBatchNorm&) = delete;
  DeferredBatchNorm& operator=(const DeferredBatchNorm&) = delete;

  // Before a mini-batch's first micro-batch: saves the running statistics, clears the sums.
  void begin();
  // After its last forward: running statistics = the saved ones updated once with the whole
  // mini-batch's statistics (a layer that saw no train-mode forward is left as it was).
  void end();

  std::size_t layers() const { return layers_.size(); }

 private:
  class Recorder;
  struct Entry {
    nn::BatchNorm* layer = nullptr;
    float* running_mean = nullptr;  // into the store's buffers, (F)
    float* running_var = nullptr;
    std::unique_ptr<Recorder> recorder;
    std::vector<float> saved_mean, saved_var;
  };
  nn::Model& model_;
  nn::LayerRange range_;
  std::vector<Entry> layers_;
};

}  // namespace dtrain::parallel::pipeline
