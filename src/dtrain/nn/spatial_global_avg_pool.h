// SpatialGlobalAvgPool: the global average pool (a ResNet's head) of images split in horizontal
// bands over the ranks of a group, without putting the bands back together.
//
// x (B, C, h, W), rank r's rows [r h, (r + 1) h) of images of H = P h rows
//   forward   s (B, C) = each plane's sum over the band (a float sum, row by row as AvgPool2d
//             sums), allreduced over the group: the whole plane's sum on every rank; y (B, C, 1, 1)
//             = s x 1 / (H W), the same on every rank (the layers after it run unsplit)
//   backward  dx = dy / (H W) on every element of the band (as AvgPool2d's: dy x (1 / (H W)),
//             bitwise), no communication
// Bytes sent per rank: one allreduce of B C floats, ring: 2 (P - 1) / P x 4 B C; gathering the
// bands instead would send (P - 1) x 4 B C h W (h W times more, 64 x at the ResNet's stage 3 on
// 32 x 32 images over 2 ranks). Not bitwise the unsplit pool's: the plane's float sum is added in
// a different order (band sums, then their sum), relative rounding about 1e-7.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class SpatialGlobalAvgPool : public Layer {
 public:
  // `group` must outlive the layer.
  SpatialGlobalAvgPool(std::string name, GroupComm& group);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, h, W) -> (B, C, 1, 1).
  tensor::Shape output_shape(const tensor::Shape& input) const override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

 private:
  GroupComm& group_;
  tensor::Shape input_shape_;
  tensor::Tensor y_;   // (B, C, 1, 1)
  tensor::Tensor dx_;  // (B, C, h, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
