#include "dtrain/train/strategies/single_worker.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtrain::train {

StepResult SingleWorker::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  const LocalGradients::Result local =
      context_.local.compute(input.x, input.labels, input.step, input.global_count);
  nn::ParamStore& store = context_.model.store();
  const auto update_start = Clock::now();
  optimizer.step(store.params(), store.grads(), input.lr);
  if (context_.trace.enabled()) {
    context_.trace.add("optimizer", "compute", TraceRecorder::kComputeThread, update_start,
                       Clock::now(), fmt::format(R"({{"step":{}}})", input.step));
  }
  StepResult result;
  result.loss = static_cast<float>(
      local.loss_sum / static_cast<double>(std::max<std::size_t>(input.labels.size(), 1)));
  result.correct = local.correct;
  return result;
}

}  // namespace dtrain::train
