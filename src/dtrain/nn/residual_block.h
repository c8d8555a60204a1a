// ResidualBlock: the basic block of a ResNet (He et al., 2016), one Layer so that a model stays a
// sequence that pipeline stages can cut.
//
//   main:     x -> conv3x3(stride S) -> BN -> ReLU -> conv3x3 -> BN                  = m
//   shortcut: x, or conv1x1(stride S) -> BN when the shape changes (S != 1 or C != F) = s
//   y = ReLU(m + s)
// x (B, C, H, W) -> y (B, F, OH, OW), OH = (H - 1) / S + 1 (3x3 kernels with padding 1). The
// convolutions have no bias (the batch norm after each has one). Sub-layers are named after the
// block: "<name>.conv1", "<name>.bn1", "<name>.conv2", "<name>.bn2", "<name>.shortcut_conv",
// "<name>.shortcut_bn", so their tensors are "block1.conv1.weight" and so on.
// Backward: g = dy * [y > 0] flows into both branches (the main branch first); dx is the sum of
// the main branch's dx and the shortcut's (g itself for the identity), added by the convolution
// that runs last (Conv2d::backward_add: conv1 with the identity, whose direct dx kernel at the
// first stage starts its sums from g; the projection's conv otherwise). The ReLU
// at 0 takes its left derivative, 0, as nn::Activation does. The ReLU after bn1 runs inside bn1
// (BatchNorm::set_fused_relu): its output and mask in the batch norm's own passes. Cost: two 3x3
// convolutions (2 * B * OH*OW * 9 * (C*F + F*F) FLOPs forward), plus F*C*OH*OW*2*B for a
// projection, and a few element-wise passes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class ResidualBlock : public Layer {
 public:
  // sigma is used only by InitKind::kNormal, for all three convolutions.
  ResidualBlock(std::string name, std::int64_t in_channels, std::int64_t out_channels,
                std::int64_t stride = 1, InitKind init = InitKind::kHe, float sigma = 0.01f);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  // Sub-layers draw from rng in order: conv1, bn1, conv2, bn2, shortcut conv, shortcut bn.
  void init(Rng& rng) override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  bool has_projection() const { return shortcut_conv_ != nullptr; }
  // conv1, bn1, conv2, bn2, then the shortcut's conv and bn when it has a projection.
  std::vector<Layer*> sublayers() override;

 private:
  std::int64_t in_channels_;
  std::int64_t out_channels_;
  std::int64_t stride_;
  std::unique_ptr<Conv2d> conv1_, conv2_, shortcut_conv_;
  std::unique_ptr<BatchNorm> bn1_, bn2_, shortcut_bn_;
  tensor::Tensor x_;  // view of the last input (the identity shortcut)
  tensor::Tensor y_;  // (B, F, OH, OW)
  tensor::Tensor g_;  // dy * [y > 0]
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
