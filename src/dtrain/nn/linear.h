// Linear: the fully connected layer, y = x W^T + b.
//
// Layout as in PyTorch: W is (out, in), so row o of W holds the weights into output o and a
// checkpoint maps one to one onto torch.nn.Linear. All three products go through tensor::gemm:
//   forward   y  (B, out) = x (B, in) W^T + b                      2*B*in*out FLOPs
//   backward  dW (out, in) += dy^T (B, out)^T x (B, in)            2*B*in*out FLOPs
//             db (out)     += sum over the batch of dy
//             dx (B, in)    = dy (B, out) W (out, in)              2*B*in*out FLOPs (skipped for
//                                                                  the first layer)
// The weight decays (weight_decay = true), the bias does not; the bias starts at 0.
// Any leading dimensions: x (B, T, ..., in) is read as B*T*... rows of (in) (it is contiguous, so
// that is a view, no copy) and y keeps them, (B, T, ..., out), as torch.nn.Linear does; B above
// then stands for the row count. The transformer's (B, T, d) activations go through as
// (B*T, d) products, one GEMM each.
//
// Forward with more outputs than samples (out > B) computes the transposed product
// y^T (out, B) = W x^T + b and transposes it into y (tensor/transpose.h, 2 x B x out x 4 bytes).
// OpenBLAS 0.3.21 runs that shape faster, transpose included, and the plain one faster when
// out <= B (the figures: docs/PERFORMANCE.md, "Ninth session"). With OpenBLAS's SkylakeX kernels
// each output is the same sum in the same order either way, so the two paths give bitwise-equal
// outputs; its Haswell kernels (also chosen on AMD Zen) differ in the last bits between the two
// (tests/support/blas_order.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class Linear : public Layer {
 public:
  // sigma is used only by InitKind::kNormal.
  Linear(std::string name, std::int64_t in_features, std::int64_t out_features,
         InitKind init = InitKind::kHe, float sigma = 0.01f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, ..., in) -> (B, ..., out); anything else is a ShapeError naming the layer and both shapes.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // y = residual + x W^T + b, residual of y's shape: a residual branch's sum folded into the
  // product (each row starts at residual + b instead of b, then the GEMM accumulates, beta = 1),
  // so the sum costs no pass of its own. Backward is unchanged.
  const tensor::Tensor& forward_onto(const tensor::Tensor& x, const tensor::Tensor& residual,
                                     const ForwardContext& ctx);

  std::int64_t in_features() const { return in_; }
  std::int64_t out_features() const { return out_; }
  // Views into the store, valid after bind(): (out, in) and (out).
  const tensor::Tensor& weight() const { return weight_; }
  const tensor::Tensor& bias() const { return bias_; }

 private:
  std::int64_t in_;
  std::int64_t out_;
  InitKind init_kind_;
  float sigma_;
  int weight_index_ = -1;
  int bias_index_ = -1;
  tensor::Tensor weight_, bias_, weight_grad_, bias_grad_;  // views into the ParamStore
  tensor::Tensor x_;   // view of the last input (B, ..., in), kept for backward
  tensor::Tensor y_;   // (B, ..., out)
  tensor::Tensor yt_;  // (out, rows): forward's product when out > rows
  tensor::Tensor dx_;  // (B, ..., in)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
