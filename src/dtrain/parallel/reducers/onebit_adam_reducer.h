// The reducer of 1-bit Adam (optim/onebit_adam.h; Tang et al. 2021): what data parallelism
// exchanges changes at the freeze.
//
//   warm-up (the optimizer's first freeze_step steps)  each bucket's gradients allreduced exactly
//              (f32, as allreduce_reducer.h), then Adam's step: 2 (P-1)/P x 4 N bytes per rank
//              for ring.
//   frozen     the buckets stay this rank's own; the update forms this rank's momentum from them
//              (scaled by P: the local gradient is 1/P of the global mean's share) and the
//              momentum goes through the 1-bit compressed allreduce (onebit_allreduce.h) between
//              the momentum's update and the parameters': 2 (P-1) (4 + c/8) bytes per rank, c =
//              ceil(N / P) rounded up to 8.
//
// The reducer counts the steps itself (each bucket's exchanges), so it knows before the update
// which phase a step is in; update() checks that the optimizer agrees. A resumed run sets the
// count from the checkpoint's optimizer steps (set_steps).
//
// Checkpoints: "compression/onebit_worker_error" (N floats) and "compression/onebit_server_error"
// (c floats), this rank's own (the data-parallel strategy stores them per rank).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_reducer.h"
#include "dtrain/parallel/onebit_allreduce.h"

namespace dtrain::parallel {

class OneBitAdamReducer final : public GradientReducer {
 public:
  OneBitAdamReducer(const ReducerContext& context, std::int64_t freeze_step);

  const char* collective() const override;
  std::string algorithm() const override;
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;
  // The optimizer must be an optim::OneBitAdam over update_segments().
  void update(optim::Optimizer& optimizer, double lr) override;

  // A resumed run: `steps` optimizer steps were taken.
  void set_steps(std::int64_t steps);
  // Updates so far, the resumed ones included.
  std::int64_t steps() const { return steps_; }
  // When the last update's compressed momentum exchange ran (start == end: none, a warm-up step),
  // so that the step reports it as communication, not as the optimizer's compute.
  std::pair<std::chrono::steady_clock::time_point, std::chrono::steady_clock::time_point>
  last_exchange() const {
    return {exchange_start_, exchange_end_};
  }
  std::vector<optim::StateTensor> state() const;
  // Takes back what state() gave; CheckpointError naming `path` otherwise.
  void load_state(const std::vector<optim::StateTensor>& state, const std::string& path);

 private:
  std::int64_t freeze_step_;
  std::int64_t steps_ = 0;  // updates so far
  std::int64_t count_;      // the parameters (N)
  OneBitAllreduce allreduce_;
  std::chrono::steady_clock::time_point exchange_start_{};
  std::chrono::steady_clock::time_point exchange_end_{};
};

ReducerFactory onebit_adam_reducer(std::int64_t freeze_step);

}  // namespace dtrain::parallel
