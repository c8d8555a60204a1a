// The forward and backward passes of this rank's share of a batch: what every strategy that keeps
// a model replica (one worker, data parallelism, parameter-server workers, local SGD) runs before
// it combines gradients or parameters with the other ranks.
//
// compute() is, in order: for each of the k = min(train.accumulate_steps, share) micro-batches,
// forward, loss, (first micro-batch only) zero the gradients, backward, which adds into the flat
// gradient buffer; then, with an injected straggler (straggler.h), its delay. The gradients are
// zeroed after the first forward, not before it, so that the 4P bytes of zeros do not push the
// parameters the forward reads out of the cache: the forward then reads what the last update (or
// allgather) just wrote, and backward adds into lines just zeroed (docs/PERFORMANCE.md).
//
// Each micro-batch's loss gradient is weighted by its size / scale_to (the global batch), so that
// the sum over micro-batches and ranks is the gradient of the global batch's mean loss. Dropout
// draws from stream (step k + m) P + rank: with one rank and no accumulation that is `step`, as in
// a single-worker run.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "dtrain/nn/model.h"
#include "dtrain/tensor/tensor.h"
#include "dtrain/train/config.h"
#include "dtrain/train/straggler.h"
#include "dtrain/train/trace.h"

namespace dtrain::train {

class LocalGradients {
 public:
  LocalGradients(const Config& config, nn::Model& model, int rank, int ranks, TraceRecorder& trace);
  // A rank that computes a share of every sample rather than its own samples (spatial
  // parallelism: rank 0 of 1 for the dropout streams) is still its own rank for an injected
  // straggler (parallel.straggler names ranks of the run).
  void set_straggler_rank(int rank) { straggler_rank_ = rank; }

  struct Result {
    double loss_sum = 0.0;     // sum over the share's samples of their loss
    std::int64_t correct = 0;  // correct predictions of the share (text: per position)
    std::int64_t samples = 0;  // the share's size
    // The share's mean loss (0 for an empty share).
    float mean_loss() const {
      return static_cast<float>(loss_sum / static_cast<double>(samples > 0 ? samples : 1));
    }
  };
  // Forward and backward of (x, labels) at global step `step`, adding into the model's gradients
  // (zeroed first), each micro-batch's loss gradient weighted by its size / scale_to (scale_to:
  // the batch the share is a part of; a whole number except for local SGD's B / P). `after_layer`,
  // when set, is passed to the last micro-batch's backward (data parallelism starts its bucket
  // allreduces from it).
  Result compute(const tensor::Tensor& x, std::span<const std::int32_t> labels, std::int64_t step,
                 double scale_to, const std::function<void(std::size_t layer)>& after_layer = {});

  // The configured loss (train.loss) of logits against labels, writing its gradient into
  // `dlogits` when not null.
  float loss(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
             tensor::Tensor* dlogits);

 private:
  const Config& config_;
  nn::Model& model_;
  int rank_;
  int ranks_;
  int straggler_rank_ = -1;  // -1: rank_
  TraceRecorder& trace_;
  StragglerSpec straggler_;
  tensor::Tensor dlogits_;
  tensor::Tensor one_hot_;
};

}  // namespace dtrain::train
