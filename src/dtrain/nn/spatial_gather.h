// SpatialGather: where a spatially split model stops splitting, the bands of every rank put back
// together into whole images, so the layers after it (flatten, fully connected head) run on every
// rank unsplit, on the same values.
//
// x (B, C, h, W), rank r's rows [r h, (r + 1) h)
//   forward   allgather over the group: (P, B, C, h, W), reordered into y (B, C, P h, W)
//   backward  dx = rows [r h, (r + 1) h) of dy: the layers after it run replicated, so dy is the
//             same on every rank and each keeps the rows of its own band, no communication
// Bytes sent per rank (ring allgather): (P - 1) x 4 B C h W forward, nothing backward.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class SpatialGather : public Layer {
 public:
  // `group` must outlive the layer.
  SpatialGather(std::string name, GroupComm& group);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, h, W) -> (B, C, P h, W).
  tensor::Shape output_shape(const tensor::Shape& input) const override;

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

 private:
  GroupComm& group_;
  tensor::Shape input_shape_;
  std::vector<float> gathered_;  // (P, B, C, h, W)
  tensor::Tensor y_;             // (B, C, P h, W)
  tensor::Tensor dx_;            // (B, C, h, W)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
