// SpatialConv2d: a convolution over one horizontal band of every image, the rows it lacks at the
// band's edges fetched from the neighbour ranks (halo exchange, halo_exchange.h).
//
// Rank r of P holds rows [r h, (r + 1) h) of each image (H = P h). The layer wraps a Conv2d with
// the unsplit layer's name and parameters (weight (F, C, K, K), bias (F): the same tensors in the
// same flat layout, replicated on every rank), its stride S and padding 0, and runs it on an
// extended band:
//   x      (B, C, h, W)
//   x_ext  (B, C, t + h + b, W + 2p)  t = p halo rows from rank r - 1 on top, b = max(0, K - p - S)
//                                     from rank r + 1 at the bottom (zeros at the image's own
//                                     edges, the unsplit layer's zero padding), p zero columns
//                                     left and right
//   y      (B, F, h / S, OW)          = rows [r h / S, (r + 1) h / S) of the unsplit layer's
//                                     output, exactly: each output reads the same K x K inputs
// (3x3, stride 1, pad 1: t = b = 1; 3x3, stride 2, pad 1: t = 1, b = 0; 1x1, stride 2: none.)
// Backward:
//   dx_ext (B, C, t + h + b, W + 2p)  from the wrapped Conv2d (it also adds this band's share of dW
//                                     and db; the strategy sums them over the ranks)
//   dx     (B, C, h, W)               = dx_ext's interior + the halo gradients the neighbours send
//                                     back (their rows that read this band's boundary rows)
// Cost per rank: the unsplit FLOPs / P (2 F C K^2 B (h / S) OW forward, twice that backward) plus
// a copy of x into x_ext (none without halo and padding: a 1x1 projection runs on x itself); bytes
// sent by rank r: 4 B C W ([r > 0] b + [r < P - 1] t) forward and 4 B C W ([r > 0] t + [r < P - 1]
// b) backward (none when the layer needs no input gradient: the model's first trainable layer).
// Splittable: K - S <= 2p < K (the unsplit output has H / S rows, so band r's outputs are rows
// [r h / S, (r + 1) h / S)); the band's rows must be a multiple of S, and t, b at most h.
// spatial_model.h decides which layers are split; the constructor refuses the others.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class SpatialConv2d : public Layer {
 public:
  // Whether `whole`'s output rows split as its input rows do: K - S <= 2p < K.
  static bool splits_along_rows(const Conv2d& whole);

  // The split of `whole` (its hyper-parameters and name) over `group`, which must outlive the
  // layer. ConfigError naming the layer when !splits_along_rows(whole).
  SpatialConv2d(const Conv2d& whole, GroupComm& group);

  std::string describe() const override;
  std::unique_ptr<Layer> clone() const override;
  // (B, C, h, W) -> (B, F, h / S, OW); a band whose rows are not a multiple of S, or (with
  // neighbours) fewer than a halo, is a ShapeError naming both.
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override { conv_.declare(store); }
  void bind(ParamStore& store) override { conv_.bind(store); }
  void init(Rng& rng) override { conv_.init(rng); }

  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;

  // Halo rows from above (p) and from below (max(0, K - p - S)).
  std::int64_t halo_top() const { return top_; }
  std::int64_t halo_bottom() const { return bottom_; }
  std::int64_t stride() const { return stride_; }
  const Conv2d& conv() const { return conv_; }

 private:
  GroupComm& group_;
  std::int64_t in_channels_, out_channels_, kernel_, stride_, padding_, top_, bottom_;
  bool has_bias_;
  Conv2d conv_;           // padding 0, run on x_ext (on x itself when direct_)
  bool direct_ = false;   // no halo rows and no padding: x_ext would be a copy of x
  tensor::Tensor x_ext_;  // (B, C, t + h + b, W + 2p)
  tensor::Tensor dx_;     // (B, C, h, W)
  // Send and receive buffers (at least 1 float, so that a 0-count side has a valid pointer).
  std::vector<float> send_up_, send_down_, recv_up_, recv_down_;
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
