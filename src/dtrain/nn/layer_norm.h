// LayerNorm: layer normalization (Ba et al., 2016) over the last dimension, as
// torch.nn.LayerNorm(d).
//
// x (..., d) is read as N rows of d (N = the product of the leading dimensions). Per row:
//   mean = sum(x) / d,  var = sum((x - mean)^2) / d   (biased, as PyTorch)
//   rstd = 1 / sqrt(var + eps),  xhat = (x - mean) rstd,  y = weight xhat + bias
// Backward, with g = dy weight:
//   dx = rstd (g - mean(g) - xhat mean(g xhat))        (the row's mean and var depend on x)
//   dweight += sum over rows of dy xhat,  dbias += sum over rows of dy
// weight (d, init 1) and bias (d, init 0) do not decay. eps = 1e-5, PyTorch's default.
// Unlike batch norm there is no running state: train and eval compute the same thing.
//
// Forward keeps each row's mean and rstd (2 N floats) and a view of x; backward recomputes xhat
// from them rather than storing N*d values. Cost: about 8 N d FLOPs forward, 12 N d backward, one
// pass over the rows each (memory bound: a (4096, 128) activation is 2 MB). Rows are split over
// the compute pool; backward sums the parameter gradients per fixed chunk of 64 rows (rows in
// order) and then the chunks in order, so they do not depend on the thread count.
// backward_plus adds a residual branch's gradient into dx in the same pass (a pre-norm block's
// skip connection: dx = residual + the normalization's input gradient), saving a separate sum.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class LayerNorm : public Layer {
 public:
  LayerNorm(std::string name, std::int64_t dim, float eps = 1e-5f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (..., d) -> (..., d), at least 2 dimensions (the batch and d).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // backward with need_input_grad, returning residual + dx; residual has the input's shape.
  const tensor::Tensor& backward_plus(const tensor::Tensor& dy, const tensor::Tensor& residual);

  std::int64_t dim() const { return dim_; }
  float eps() const { return eps_; }
  // Views into the store, valid after bind(): (d) each.
  const tensor::Tensor& weight() const { return weight_; }
  const tensor::Tensor& bias() const { return bias_; }

 private:
  std::int64_t dim_;
  float eps_;
  int weight_index_ = -1;
  int bias_index_ = -1;
  tensor::Tensor weight_, bias_, weight_grad_, bias_grad_;  // views into the ParamStore
  tensor::Tensor x_;                                        // view of the last input (..., d)
  tensor::Tensor mean_;                                     // (N)
  tensor::Tensor rstd_;                                     // (N)
  tensor::Tensor y_;                                        // (..., d)
  tensor::Tensor dx_;                                       // (..., d)
  tensor::Tensor partial_;  // (chunks, 2, d): per chunk of rows, sum dy xhat and sum dy

  // residual: nullptr, or N d values added to dx.
  const tensor::Tensor& backward_rows(const tensor::Tensor& dy, bool need_input_grad,
                                      const float* residual);
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
