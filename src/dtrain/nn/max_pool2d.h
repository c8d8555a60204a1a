// MaxPool2d: the largest value of each K x K window, per channel.
//
// x (B, C, H, W) -> y (B, C, OH, OW), OH = (H - K) / S + 1 (likewise OW). No padding: every window
// lies inside the image, and the rows and columns that a window would need beyond the bottom or
// right edge are dropped (PyTorch's ceil_mode=False with padding=0). LeNet and the ResNet of the
// model zoo need nothing else.
// Forward records, for every output, the flat index (into its H*W plane) of the input it took;
// backward adds dy there, so overlapping windows (S < K) sum their gradients. Ties: the FIRST
// maximum in row-major window order wins (a later equal value does not replace it), so the whole
// gradient of a tied window goes to one input, as in PyTorch's CPU kernel. A NaN input propagates:
// it is taken when first seen and never replaced. Cost: B*C*OH*OW*K*K comparisons forward,
// B*C*OH*OW adds backward; planes are split over the compute pool. The 2x2 stride-2 window runs 16
// windows per step with AVX-512 where the build has it, forward and backward (same results).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class MaxPool2d : public Layer {
 public:
  MaxPool2d(std::string name, std::int64_t kernel, std::int64_t stride);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, H, W) -> (B, C, OH, OW); a wrong rank or a window larger than the input is a ShapeError.
  tensor::Shape output_shape(const tensor::Shape& input) const override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // For every output element of the last forward, the index into its input plane (y * W + x) of
  // the value it took.
  const std::vector<std::int32_t>& argmax() const { return argmax_; }

  std::int64_t kernel() const { return kernel_; }
  std::int64_t stride() const { return stride_; }

 private:
  std::int64_t kernel_;
  std::int64_t stride_;
  tensor::Shape input_shape_;
  std::vector<std::int32_t> argmax_;  // (B, C, OH, OW)
  tensor::Tensor y_;                  // (B, C, OH, OW)
  tensor::Tensor dx_;                 // (B, C, H, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
