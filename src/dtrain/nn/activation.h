// Activation: an element-wise non-linearity, any shape in, the same shape out.
//
//   sigmoid     1 / (1 + e^-x)                      ' = y (1 - y)
//   tanh        tanh x                              ' = 1 - y^2
//   relu        max(x, 0)                           ' = [x > 0]
//   softplus    log(1 + e^x)                        ' = sigmoid(x)
//   leaky_relu  x if x > 0 else alpha x             ' = 1 or alpha
//   elu         x if x > 0 else alpha (e^x - 1)     ' = 1 or alpha e^x
//   gelu        x Phi(x) = 0.5 x (1 + erf(x/sqrt2)) ' = Phi(x) + x phi(x)   (the erf form, not
//               the tanh fit; erf and exp within 4e-7, nn/fast_math.h)
//
// At the kink x = 0 the piecewise kinds take their LEFT derivative, consistently: relu'(0) = 0,
// leaky_relu'(0) = alpha, elu'(0) = alpha (its left limit alpha e^0). The x <= 0 branch owns 0 in
// the forward pass too. sigmoid and softplus are written so that no exp overflows: softplus(x) =
// max(x, 0) + log1p(e^-|x|) is exact to f32 at x = +-100.
//
// Any rank: (B, F), (B, T, F), (B, C, H, W) alike, element by element.
// Forward and backward are one pass over the elements (memory bound, a few ns each), split over
// the compute pool in slices of at least kActivationGrain elements.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

enum class ActivationKind { kSigmoid, kTanh, kRelu, kSoftplus, kLeakyRelu, kElu, kGelu };

// "sigmoid" | "tanh" | "relu" | "softplus" | "leaky_relu" | "elu" | "gelu"; anything else is a
// ConfigError naming model.activation and the accepted names.
ActivationKind parse_activation(std::string_view name);
std::string_view activation_name(ActivationKind kind);

// Below this many elements a second thread costs more than it saves.
inline constexpr std::int64_t kActivationGrain = 16384;

class Activation : public Layer {
 public:
  // alpha: the negative slope of leaky_relu, the saturation value -alpha of elu; unused otherwise.
  Activation(std::string name, ActivationKind kind, float alpha = 0.01f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override { return input; }

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  ActivationKind kind() const { return kind_; }
  float alpha() const { return alpha_; }

 private:
  ActivationKind kind_;
  float alpha_;
  tensor::Tensor x_;   // view of the last input
  tensor::Tensor y_;   // same shape as x
  tensor::Tensor dx_;  // same shape as x
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
