// AvgPool2d: the mean of each K x K window, per channel; or, as global(), of the whole map.
//
// x (B, C, H, W) -> y (B, C, OH, OW), OH = (H - K) / S + 1 (likewise OW). No padding (so every
// window holds exactly K*K inputs and the divisor is always K*K); rows and columns a window would
// need beyond the bottom or right edge are dropped (PyTorch's ceil_mode=False). global() averages
// each whole H x W plane to one value, whatever H and W are at forward time: y (B, C, 1, 1), the
// head of a ResNet.
// Backward spreads dy / (K*K) over the window; overlapping windows (S < K) sum.
// Cost: B*C*OH*OW*K*K adds each way; planes are split over the compute pool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class AvgPool2d : public Layer {
 public:
  AvgPool2d(std::string name, std::int64_t kernel, std::int64_t stride);
  // The global average pool: one window the size of the input map.
  static std::unique_ptr<AvgPool2d> global(std::string name);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, H, W) -> (B, C, OH, OW); a wrong rank or a window larger than the input is a ShapeError.
  tensor::Shape output_shape(const tensor::Shape& input) const override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  bool is_global() const { return kernel_ == 0; }
  // The window and its stride (0 for the global pool).
  std::int64_t kernel() const { return kernel_; }
  std::int64_t stride() const { return stride_; }

 private:
  // kernel 0 marks the global pool; window_h/w() give the window for an input of height h, width w.
  std::int64_t window_h(std::int64_t h) const { return is_global() ? h : kernel_; }
  std::int64_t window_w(std::int64_t w) const { return is_global() ? w : kernel_; }

  std::int64_t kernel_;
  std::int64_t stride_;
  tensor::Shape input_shape_;
  tensor::Tensor y_;   // (B, C, OH, OW)
  tensor::Tensor dx_;  // (B, C, H, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
