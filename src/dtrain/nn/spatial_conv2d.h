// SpatialConv2d: a stride-1 "same" convolution over one horizontal band of every image, the rows
// it lacks at the band's edges fetched from the neighbour ranks (halo exchange, halo_exchange.h).
//
// Rank r of P holds rows [r h, (r + 1) h) of each image (H = P h). The layer wraps a Conv2d with
// the unsplit layer's name and parameters (weight (F, C, K, K), bias (F): the same tensors in the
// same flat layout, replicated on every rank) and padding 0, and runs it on an extended band:
//   x      (B, C, h, W)
//   x_ext  (B, C, h + 2p, W + 2p)   p = (K - 1) / 2: p halo rows from rank r - 1 on top and from
//                                   rank r + 1 at the bottom (zeros at the image's own edges, the
//                                   unsplit layer's zero padding), p zero columns left and right
//   y      (B, F, h, W)             = rows [r h, (r + 1) h) of the unsplit layer's output, exactly:
//                                   each output reads the same K x K inputs
// Backward:
//   dx_ext (B, C, h + 2p, W + 2p)   from the wrapped Conv2d (it also adds this band's share of dW
//                                   and db; the strategy sums them over the ranks)
//   dx     (B, C, h, W)             = dx_ext's interior + the halo gradients the neighbours send
//                                   back (their rows that read this band's boundary rows)
// Cost per rank: the unsplit FLOPs / P (2 F C K^2 B h W forward, twice that backward) plus a copy
// of x into x_ext; bytes sent per neighbour: 4 B C p W forward and the same backward (none when
// the layer needs no input gradient: the model's first trainable layer).
// Only stride 1 and padding (K - 1) / 2 with an odd K: the output band is then the input band, so
// the split stays aligned from layer to layer. Anything else is refused by the constructor
// (spatial_model.h decides which layers are split).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class SpatialConv2d : public Layer {
 public:
  // The split of `whole` (its hyper-parameters and name) over `group`, which must outlive the
  // layer. ConfigError naming the layer when whole's stride is not 1 or its padding not
  // (K - 1) / 2 with K odd.
  SpatialConv2d(const Conv2d& whole, GroupComm& group);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, h, W) -> (B, F, h, W); a band of fewer rows than the halo (h < p, with neighbours) is a
  // ShapeError naming both.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override { conv_.declare(store); }
  void bind(ParamStore& store) override { conv_.bind(store); }
  void init(Rng& rng) override { conv_.init(rng); }

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // Halo rows per side, (K - 1) / 2.
  std::int64_t halo() const { return halo_; }
  const Conv2d& conv() const { return conv_; }

 private:
  GroupComm& group_;
  std::int64_t in_channels_, out_channels_, kernel_, halo_;
  bool has_bias_;
  Conv2d conv_;                                               // padding 0, run on x_ext
  tensor::Tensor x_ext_;                                      // (B, C, h + 2p, W + 2p)
  tensor::Tensor dx_;                                         // (B, C, h, W)
  tensor::Tensor send_up_, send_down_, recv_up_, recv_down_;  // (B C, p, W) each
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
