#include "dtrain/nn/row_parallel_linear.h"

#include "dtrain/base/error.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::nn {

RowParallelLinear::RowParallelLinear(std::string name, std::int64_t in_features,
                                     std::int64_t out_features, GroupComm& group)
    : Layer(std::move(name)), in_(in_features), out_(out_features), group_(group) {
  if (in_ <= 0 || out_ <= 0 || in_ % group.size() != 0) {
    throw ConfigError(fmt::format(
        "layer {}: {} input features cannot be split over {} tensor-parallel ranks (not "
        "divisible); use a rank count that divides {}",
        this->name(), in_, group.size(), in_));
  }
  in_local_ = in_ / group.size();
}

std::string RowParallelLinear::describe() const {
  return fmt::format("RowParallelLinear({} -> {}, inputs {} of {} on rank {})", in_, out_,
                     in_local_, in_, group_.rank());
}

tensor::Shape RowParallelLinear::output_shape(const tensor::Shape& input) const {
  if (input.size() < 2 || input.back() != in_local_) {
    throw ShapeError(
        fmt::format("layer {} ({}) expects input [B, {}] (its slice of {} features), got {}",
                    name(), describe(), in_local_, in_, tensor::batch_shape_str(input)));
  }
  tensor::Shape output = input;
  output.back() = out_;
  return output;
}

void RowParallelLinear::declare(ParamStore& store) {
  weight_index_ = store.add_param(name() + ".weight", {out_, in_local_}, /*weight_decay=*/true);
  bias_index_ = store.add_param(name() + ".bias", {out_}, /*weight_decay=*/false);
}

void RowParallelLinear::bind(ParamStore& store) {
  weight_ = store.param(weight_index_);
  bias_ = store.param(bias_index_);
  weight_grad_ = store.grad(weight_index_);
  bias_grad_ = store.grad(bias_index_);
}

const tensor::Tensor& RowParallelLinear::forward(const tensor::Tensor& x,
                                                 const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const std::int64_t rows = x.numel() / in_local_;
  x_ = x;
  y_.ensure_shape(out_shape);
  float* y = y_.data();
  // This rank's part of x W^T, then g: the sum over the group, then the bias once.
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, rows, out_, in_local_, 1.0f, x.data(),
               in_local_, weight_.data(), in_local_, 0.0f, y, out_);
  group_.allreduce_sum(y, y_.numel());
  const float* b = bias_.data();
  for (std::int64_t row = 0; row < rows; ++row) {
    float* y_row = y + row * out_;
    for (std::int64_t o = 0; o < out_; ++o) y_row[o] += b[o];
  }
  return y_;
}

const tensor::Tensor& RowParallelLinear::backward(const tensor::Tensor& dy, bool need_input_grad) {
  const std::int64_t rows = x_.numel() / in_local_;
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, out_, in_local_, rows, 1.0f, dy.data(),
               out_, x_.data(), in_local_, 1.0f, weight_grad_.data(), in_local_);
  float* db = bias_grad_.data();
  const float* g = dy.data();
  for (std::int64_t row = 0; row < rows; ++row) {
    const float* g_row = g + row * out_;
    for (std::int64_t o = 0; o < out_; ++o) db[o] += g_row[o];
  }
  if (!need_input_grad) return none_;
  dx_.ensure_shape(x_.shape());
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, rows, in_local_, out_, 1.0f, dy.data(), out_,
               weight_.data(), in_local_, 0.0f, dx_.data(), in_local_);
  return dx_;
}

std::unique_ptr<Layer> RowParallelLinear::clone() const {
  return std::make_unique<RowParallelLinear>(name(), in_, out_, group_);
}

}  // namespace dtrain::nn
