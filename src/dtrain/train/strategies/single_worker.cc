#include "dtrain/train/strategies/single_worker.h"

#include <fmt/format.h>

namespace dtrain::train {

StepResult step_alone(const StrategyContext& context, const StepInput& input,
                      optim::Optimizer& optimizer, double scale_to, const char* update_name) {
  using Clock = TraceRecorder::Clock;
  const LocalGradients::Result local =
      context.local.compute(input.x, input.labels, input.step, scale_to);
  nn::ParamStore& store = context.model.store();
  const auto update_start = Clock::now();
  optimizer.step(store.params(), store.grads(), input.lr);
  if (context.trace.enabled()) {
    context.trace.add(update_name, "compute", TraceRecorder::kComputeThread, update_start,
                      Clock::now(), fmt::format(R"({{"step":{}}})", input.step));
  }
  StepResult result;
  result.loss = local.mean_loss();
  result.correct = local.correct;
  return result;
}

StepResult SingleWorker::step(const StepInput& input, optim::Optimizer& optimizer) {
  return step_alone(context_, input, optimizer, static_cast<double>(input.global_count),
                    "optimizer");
}

}  // namespace dtrain::train
