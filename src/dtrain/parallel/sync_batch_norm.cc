#include "dtrain/parallel/sync_batch_norm.h"

#include <algorithm>

namespace dtrain::parallel {
namespace {

void collect(nn::Layer& layer, std::vector<nn::BatchNorm*>& out) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&layer)) out.push_back(bn);
  for (nn::Layer* child : layer.sublayers()) collect(*child, out);
}

}  // namespace

std::vector<nn::BatchNorm*> batch_norm_layers(nn::Model& model) {
  std::vector<nn::BatchNorm*> out;
  for (const auto& layer : model.layers()) collect(*layer, out);
  return out;
}

std::unique_ptr<SyncBatchNormReducer> sync_batch_norm(nn::Model& model, comm::Communicator& comm) {
  auto reducer = std::make_unique<SyncBatchNormReducer>(comm);
  for (nn::BatchNorm* bn : batch_norm_layers(model)) bn->set_reducer(reducer.get());
  return reducer;
}

}  // namespace dtrain::parallel
