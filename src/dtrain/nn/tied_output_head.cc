#include "dtrain/nn/tied_output_head.h"

#include "dtrain/base/error.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::nn {

TiedOutputHead::TiedOutputHead(std::string name, std::string tied_name, std::int64_t dim,
                               std::int64_t vocab)
    : Layer(std::move(name)), tied_name_(std::move(tied_name)), dim_(dim), vocab_(vocab) {
  if (dim_ <= 0 || vocab_ <= 0) {
    throw ConfigError(fmt::format("layer {}: TiedOutputHead({} -> {}) needs positive sizes",
                                  this->name(), dim_, vocab_));
  }
}

std::string TiedOutputHead::describe() const {
  return fmt::format("TiedOutputHead({} -> {}, weight {})", dim_, vocab_, tied_name_);
}

tensor::Shape TiedOutputHead::output_shape(const tensor::Shape& input) const {
  if (input.size() < 2 || input.back() != dim_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, ..., {}], got {}; check the previous layer's output",
        name(), describe(), dim_, tensor::batch_shape_str(input)));
  }
  tensor::Shape output = input;
  output.back() = vocab_;
  return output;
}

void TiedOutputHead::bind(ParamStore& store) {
  const int index = store.find_param(tied_name_);
  if (index < 0) {
    throw ConfigError(fmt::format(
        "layer {}: the tied weight '{}' is not a parameter of this model; the embedding that owns "
        "it must come before the head",
        name(), tied_name_));
  }
  const tensor::Shape& shape = store.param_entries()[static_cast<std::size_t>(index)].shape;
  if (shape != tensor::Shape{vocab_, dim_}) {
    throw ConfigError(fmt::format("layer {}: the tied weight '{}' has shape {}, the head needs {}",
                                  name(), tied_name_, tensor::shape_str(shape),
                                  tensor::shape_str({vocab_, dim_})));
  }
  weight_ = store.param(index);
  weight_grad_ = store.grad(index);
}

const tensor::Tensor& TiedOutputHead::forward(const tensor::Tensor& x,
                                              const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const std::int64_t rows = x.numel() / dim_;
  x_ = x;
  y_.ensure_shape(out_shape);
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, rows, vocab_, dim_, 1.0f, x.data(), dim_,
               weight_.data(), dim_, 0.0f, y_.data(), vocab_);
  return y_;
}

const tensor::Tensor& TiedOutputHead::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t rows = x_.numel() / dim_;
  // dE (V, d) += dy^T x, into the embedding's gradient range.
  tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, vocab_, dim_, rows, 1.0f, dy.data(), vocab_,
               x_.data(), dim_, 1.0f, weight_grad_.data(), dim_);
  if (!need_input_grad) return none_;
  dx_.ensure_shape(x_.shape());
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, rows, dim_, vocab_, 1.0f, dy.data(), vocab_,
               weight_.data(), dim_, 0.0f, dx_.data(), dim_);
  return dx_;
}

std::unique_ptr<Layer> TiedOutputHead::clone() const {
  return std::make_unique<TiedOutputHead>(name(), tied_name_, dim_, vocab_);
}

}  // namespace dtrain::nn
