#include "dtrain/parallel/sync_batch_norm.h"

#include <algorithm>

namespace dtrain::parallel {
namespace {

void collect(nn::Layer& layer, std::vector<nn::BatchNorm*>& out) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(&layer)) out.push_back(bn);
  for (nn::Layer* child : layer.sublayers()) collect(*child, out);
}

}  // namespace

void SyncBatchNormReducer::reduce_statistics(nn::ChannelStats& stats) {
  // (sum (F), sum_sq (F), count): one allreduce. The count is exact in a double up to 2^53.
  const std::size_t f = stats.sum.size();
  buffer_.resize(2 * f + 1);
  std::copy(stats.sum.begin(), stats.sum.end(), buffer_.begin());
  std::copy(stats.sum_sq.begin(), stats.sum_sq.end(), buffer_.begin() + static_cast<long>(f));
  buffer_[2 * f] = static_cast<double>(stats.count);
  comm_.allreduce(buffer_.data(), static_cast<std::int64_t>(buffer_.size()), DType::kF64,
                  comm::ReduceOp::kSum);
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), stats.sum.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.begin() + static_cast<long>(2 * f),
            stats.sum_sq.begin());
  stats.count = static_cast<std::int64_t>(buffer_[2 * f]);
}

void SyncBatchNormReducer::reduce_gradient_sums(std::vector<double>& sum_dy,
                                                std::vector<double>& sum_dy_xhat) {
  const std::size_t f = sum_dy.size();
  buffer_.resize(2 * f);
  std::copy(sum_dy.begin(), sum_dy.end(), buffer_.begin());
  std::copy(sum_dy_xhat.begin(), sum_dy_xhat.end(), buffer_.begin() + static_cast<long>(f));
  comm_.allreduce(buffer_.data(), static_cast<std::int64_t>(buffer_.size()), DType::kF64,
                  comm::ReduceOp::kSum);
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), sum_dy.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.end(), sum_dy_xhat.begin());
}

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
