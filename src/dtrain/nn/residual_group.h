// ResidualGroup: y = act(body(x) + shortcut(x)) over lists of layers, one Layer so that a model
// stays a sequence that pipeline stages can cut (a layer list's `kind = "residual"`,
// docs/MODELS.md).
//
//   body:     x -> body[0] -> ... -> body[n-1]                          = m   (B, ...)
//   shortcut: x, or x -> shortcut[0] -> ... -> shortcut[k-1] (a projection) = s   (same shape as m)
//   y = act(m + s), act an Activation or none
// Backward: g = act'(dy) flows into both branches, last layer first; dx = dx_body + dx_shortcut
// (g itself for the identity), summed by a plain Conv2d that runs last where there is one
// (Conv2d::backward_add: the body's first layer with the identity, the shortcut's otherwise). Init
// draws from one stream in order: body layers, then shortcut layers. So with body conv3x3,
// batch_norm, relu, conv3x3, batch_norm, a shortcut conv1x1, batch_norm (or none) and act relu,
// this computes what ResidualBlock computes, bit for bit, and initialises from the same draws
// (tests/nn/layer_list_test.cc holds the two side by side). Cost: the layers', plus one pass over y
// for the sum and one for dx (none where a plain Conv2d runs last).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/nn/activation.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class ResidualGroup : public Layer {
 public:
  // body: at least one layer, already named (by convention "<name>.<child>"); shortcut: empty for
  // the identity. act: nullptr for none.
  ResidualGroup(std::string name, std::vector<std::unique_ptr<Layer>> body,
                std::vector<std::unique_ptr<Layer>> shortcut, std::unique_ptr<Activation> act);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // Both branches' shapes; when they differ, a ShapeError naming the group and both shapes.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // The body's layers, the shortcut's, then the activation.
  std::vector<Layer*> sublayers() override;
  std::vector<std::string> borrowed_params() const override;

  // The shapes of both branches for `input` (B, ...): what output_shape compares.
  tensor::Shape body_shape(const tensor::Shape& input) const;
  tensor::Shape shortcut_shape(const tensor::Shape& input) const;

  // The branches and the activation (nullptr for none), read-only: a spatial split
  // (spatial_model.h) rebuilds the group from their split twins.
  const std::vector<std::unique_ptr<Layer>>& body() const { return body_; }
  const std::vector<std::unique_ptr<Layer>>& shortcut() const { return shortcut_; }
  const Activation* activation() const { return act_.get(); }

 private:
  std::vector<std::unique_ptr<Layer>> body_;
  std::vector<std::unique_ptr<Layer>> shortcut_;
  std::unique_ptr<Activation> act_;
  tensor::Tensor x_;   // view of the last input (the identity shortcut)
  tensor::Tensor y_;   // m + s, (B, ...)
  tensor::Tensor dx_;  // (B, ...) like x
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
