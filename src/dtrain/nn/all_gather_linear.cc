#include "dtrain/nn/all_gather_linear.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {

AllGatherLinear::AllGatherLinear(std::string name, std::int64_t in_features,
                                 std::int64_t out_features, GroupComm& group, InitKind init,
                                 float sigma)
    : Layer(std::move(name)), out_(out_features), group_(group), init_(init), sigma_(sigma) {
  if (out_ <= 0 || out_ % group.size() != 0) {
    throw ConfigError(fmt::format(
        "layer {}: {} output features cannot be split over {} tensor-parallel ranks (not "
        "divisible); use a rank count that divides {}",
        this->name(), out_, group.size(), out_));
  }
  local_ = std::make_unique<Linear>(this->name(), in_features, out_ / group.size(), init, sigma);
}

std::string AllGatherLinear::describe() const {
  return fmt::format("AllGatherLinear({} -> {}, {} of {} on rank {})", local_->in_features(), out_,
                     local_->out_features(), out_, group_.rank());
}

tensor::Shape AllGatherLinear::output_shape(const tensor::Shape& input) const {
  tensor::Shape output = local_->output_shape(input);
  output.back() = out_;
  return output;
}

void AllGatherLinear::declare(ParamStore& store) { local_->declare(store); }
void AllGatherLinear::bind(ParamStore& store) { local_->bind(store); }

const tensor::Tensor& AllGatherLinear::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  const tensor::Tensor& mine = local_->forward(x, ctx);
  const std::int64_t parts = group_.size();
  const std::int64_t local_out = out_ / parts;
  const std::int64_t rows = mine.numel() / local_out;
  gathered_.ensure_shape({parts, rows, local_out});
  group_.allgather(mine.data(), gathered_.data(), mine.numel());
  // Rank-major blocks -> each row's outputs side by side.
  y_.ensure_shape(output_shape(x.shape()));
  for (std::int64_t r = 0; r < parts; ++r) {
    const float* block = gathered_.data() + r * rows * local_out;
    for (std::int64_t row = 0; row < rows; ++row) {
      std::copy(block + row * local_out, block + (row + 1) * local_out,
                y_.data() + row * out_ + r * local_out);
    }
  }
  return y_;
}

const tensor::Tensor& AllGatherLinear::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t local_out = out_ / group_.size();
  const std::int64_t rows = dy.numel() / out_;
  tensor::Shape local_shape = dy.shape();
  local_shape.back() = local_out;
  dy_local_.ensure_shape(local_shape);
  const std::int64_t first = group_.rank() * local_out;
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* from = dy.data() + row * out_ + first;
    std::copy(from, from + local_out, dy_local_.data() + row * local_out);
  }
  const tensor::Tensor& partial = local_->backward(dy_local_, need_input_grad);
  if (!need_input_grad) return none_;
  dx_.ensure_shape(partial.shape());
  std::copy(partial.data(), partial.data() + partial.numel(), dx_.data());
  group_.allreduce_sum(dx_.data(), dx_.numel());
  return dx_;
}

std::unique_ptr<Layer> AllGatherLinear::clone() const {
  return std::make_unique<AllGatherLinear>(name(), local_->in_features(), out_, group_, init_,
                                           sigma_);
}

}  // namespace dtrain::nn
