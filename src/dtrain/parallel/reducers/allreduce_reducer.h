// The plain reducer: each bucket's gradients summed over the ranks by an allreduce (the algorithm
// of ReducerContext::collective, or the communicator's default); every rank then updates every
// parameter with the same sums (Horovod, PyTorch DDP without hooks).
// Bytes sent per rank and step: the allreduce's, 2 (P-1)/P x 4N for ring.
#pragma once

#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::parallel {

class AllreduceReducer final : public GradientReducer {
 public:
  explicit AllreduceReducer(const ReducerContext& context) : GradientReducer(context) {}
  const char* collective() const override { return "allreduce"; }
  std::string algorithm() const override;
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;
};

ReducerFactory allreduce_reducer();

}  // namespace dtrain::parallel
