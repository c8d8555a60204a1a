#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::parallel {

std::vector<optim::Segment> GradientReducer::update_segments() const {
  std::vector<optim::Segment> segments;
  for (const auto& entry : context_.model.store().param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  return segments;
}

void GradientReducer::update(optim::Optimizer& optimizer, double lr) {
  nn::ParamStore& store = context_.model.store();
  optimizer.step(store.params(), store.grads(), lr);
}

}  // namespace dtrain::parallel
