// Flatten: (B, d1, d2, ...) -> (B, d1 * d2 * ...), the bridge from images to dense layers.
//
// Both directions are views of the neighbour's buffer (no copy, no cost): forward reshapes x,
// backward reshapes dy back to x's shape. Input must be contiguous and have at least 2 dimensions.
#pragma once

#include <string>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class Flatten : public Layer {
 public:
  explicit Flatten(std::string name) : Layer(std::move(name)) {}

  std::string describe() const override { return "Flatten"; }
  std::unique_ptr<Layer> clone() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

 private:
  tensor::Shape input_shape_;
  tensor::Tensor y_;   // view of x
  tensor::Tensor dx_;  // view of dy
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
