#include "dtrain/train/strategy.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::train {

comm::Communicator& required_communicator(const StrategyContext& context,
                                          std::string_view strategy) {
  if (context.comm == nullptr) {
    throw InternalError(fmt::format("{} needs the ranks' communicator", strategy));
  }
  return *context.comm;
}

std::vector<optim::Segment> Strategy::optimizer_segments() const {
  std::vector<optim::Segment> segments;
  for (const auto& entry : context_.model.store().param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  return segments;
}

std::unique_ptr<data::SharePlan> Strategy::share_plan(std::int64_t train_samples) const {
  return std::make_unique<data::GlobalBatchPlan>(train_samples, context_.config.train.batch_size,
                                                 context_.rank, context_.world,
                                                 context_.config.train.accumulate_steps);
}

std::vector<optim::StateTensor> Strategy::checkpoint_state(const optim::Optimizer& optimizer) {
  return optimizer.state();
}

void Strategy::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                             optim::Optimizer& optimizer, const std::string& path) {
  try {
    optimizer.load_state(state, optimizer_steps);
  } catch (const CheckpointError& e) {
    throw CheckpointError(fmt::format("checkpoint {}: {}", path, e.what()));
  }
}

}  // namespace dtrain::train
