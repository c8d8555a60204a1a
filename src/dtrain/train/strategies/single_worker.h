// One worker (parallel.workers = 1, no MPI launcher): forward and backward of the whole batch, then
// one optimizer update over the flat buffers. No communicator, nothing to combine.
#pragma once

#include "dtrain/train/strategy.h"

namespace dtrain::train {

// One rank's step on its own replica: forward and backward of its share (each micro-batch's
// gradient weighted by its size / scale_to), then the update, traced as `update_name`. One worker
// runs it every step; local SGD runs it between averages.
StepResult step_alone(const StrategyContext& context, const StepInput& input,
                      optim::Optimizer& optimizer, double scale_to, const char* update_name);

class SingleWorker final : public Strategy {
 public:
  explicit SingleWorker(const StrategyContext& context) : Strategy(context) {}
  std::string name() const override { return "single"; }
  bool reshards_checkpoints() const override { return true; }
  bool forward_backward_is_local() const override { return true; }
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
};

}  // namespace dtrain::train
