// One worker (parallel.workers = 1, no MPI launcher): forward and backward of the whole batch, then
// one optimizer update over the flat buffers. No communicator, nothing to combine.
#pragma once

#include "dtrain/train/strategy.h"

namespace dtrain::train {

class SingleWorker final : public Strategy {
 public:
  explicit SingleWorker(const StrategyContext& context) : Strategy(context) {}
  std::string name() const override { return "single"; }
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
};

}  // namespace dtrain::train
