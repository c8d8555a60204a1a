#include "dtrain/nn/column_parallel_linear.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {
namespace {

std::int64_t local_outputs(const std::string& name, std::int64_t out, int parts) {
  if (parts <= 0 || out % parts != 0) {
    throw ConfigError(fmt::format(
        "layer {}: {} output features cannot be split over {} tensor-parallel ranks (not "
        "divisible); use a rank count that divides {}",
        name, out, parts, out));
  }
  return out / parts;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(std::string name, std::int64_t in_features,
                                           std::int64_t out_features, GroupComm& group)
    : Layer(std::move(name)), out_(out_features), group_(group) {
  local_ = std::make_unique<Linear>(this->name(), in_features,
                                    local_outputs(this->name(), out_, group.size()),
                                    InitKind::kNormal, 0.02f);
}

std::string ColumnParallelLinear::describe() const {
  return fmt::format("ColumnParallelLinear({} -> {}, {} of {} on rank {})", local_->in_features(),
                     out_, local_->out_features(), out_, group_.rank());
}

tensor::Shape ColumnParallelLinear::output_shape(const tensor::Shape& input) const {
  return local_->output_shape(input);
}

void ColumnParallelLinear::declare(ParamStore& store) { local_->declare(store); }
void ColumnParallelLinear::bind(ParamStore& store) { local_->bind(store); }

const tensor::Tensor& ColumnParallelLinear::forward(const tensor::Tensor& x,
                                                    const ForwardContext& ctx) {
  return local_->forward(x, ctx);  // f: identity
}

const tensor::Tensor& ColumnParallelLinear::backward(const tensor::Tensor& dy,
                                                     bool need_input_grad) {
  const tensor::Tensor& partial = local_->backward(dy, need_input_grad);
  if (!need_input_grad) return none_;
  // f's backward: every rank holds dy_r W_r, a part of dx; the sum is the unsplit layer's dx.
  dx_.ensure_shape(partial.shape());
  std::copy(partial.data(), partial.data() + partial.numel(), dx_.data());
  group_.allreduce_sum(dx_.data(), dx_.numel());
  return dx_;
}

std::unique_ptr<Layer> ColumnParallelLinear::clone() const {
  return std::make_unique<ColumnParallelLinear>(name(), local_->in_features(), out_, group_);
}

}  // namespace dtrain::nn
