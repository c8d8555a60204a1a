#include "dtrain/nn/flatten.h"

#include "dtrain/base/error.h"

namespace dtrain::nn {

tensor::Shape Flatten::output_shape(const tensor::Shape& input) const {
  if (input.size() < 2) {
    throw ShapeError(
        fmt::format("layer {} ({}) expects input [B, ...] with at least 2 dimensions, got {}",
                    name(), describe(), tensor::shape_str(input)));
  }
  std::int64_t features = 1;
  for (std::size_t i = 1; i < input.size(); ++i) features *= input[i];
  return {input[0], features};
}

const tensor::Tensor& Flatten::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  input_shape_ = x.shape();
  y_ = x.reshape(out_shape);
  return y_;
}

const tensor::Tensor& Flatten::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.is_contiguous(), "layer {}: dy must be contiguous", name());
  DTRAIN_CHECK_EQ(dy.numel(), tensor::shape_numel(input_shape_));
  dx_ = dy.reshape(input_shape_);
  return dx_;
}

std::unique_ptr<Layer> Flatten::clone() const { return std::make_unique<Flatten>(name()); }

}  // namespace dtrain::nn
