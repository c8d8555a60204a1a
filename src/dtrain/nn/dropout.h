// Dropout: inverted dropout (Srivastava et al., 2014).
//
// In training each element is kept with probability 1 - p and scaled by 1 / (1 - p), so the
// expected activation equals the input and evaluation needs no rescaling: in eval mode (and for
// p = 0) the layer is the identity and costs nothing.
//
// The mask is a pure function of (ctx.seed, ctx.step, layer name, element index): element i uses
// word i of the Philox stream Rng(ctx.seed, rng_stream(kDropoutStreamPurpose, step, hash(name))).
// So the same step gives the same mask on every rank, thread count and replay (a recomputed forward
// for activation checkpointing or a pipeline's re-run sees the same mask), while different layers
// and steps get independent masks. Cost: one u32 draw and one multiply per element forward, one
// multiply backward; the mask is kept as (B, ...) floats of 0 or 1 / (1 - p).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

// The purpose tag of dropout's random streams (see rng_stream in base/rng.h).
inline constexpr std::uint64_t kDropoutStreamPurpose = 0xD709;

class Dropout : public Layer {
 public:
  // p: the probability of dropping an element, in [0, 1); otherwise a ConfigError.
  Dropout(std::string name, float p);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override { return input; }

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  float p() const { return p_; }
  // The mask of the last training forward: 0 or 1 / (1 - p) per element.
  const tensor::Tensor& mask() const { return mask_; }

 private:
  float p_;
  std::uint64_t name_hash_;
  bool identity_ = true;        // the last forward was eval or p = 0
  tensor::Tensor passthrough_;  // shallow copy of x (identity forward) or dy (identity backward)
  tensor::Tensor mask_;
  tensor::Tensor y_;
  tensor::Tensor dx_;
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
