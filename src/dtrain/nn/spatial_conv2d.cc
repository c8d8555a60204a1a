#include "dtrain/nn/spatial_conv2d.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/nn/halo_exchange.h"

namespace dtrain::nn {

namespace {

// Halo rows of `whole`, or ConfigError when the layer's output band would not be its input band.
std::int64_t same_padding_halo(const Conv2d& whole) {
  const std::int64_t k = whole.kernel();
  if (whole.stride() != 1 || k % 2 == 0 || whole.padding() != (k - 1) / 2) {
    throw ConfigError(fmt::format(
        "layer {} ({}): spatial parallelism splits only stride-1 convolutions with an odd kernel "
        "and padding (K - 1) / 2 (here stride {}, kernel {}, padding {}; needs stride 1, padding "
        "{})",
        whole.name(), whole.describe(), whole.stride(), k, whole.padding(), (k - 1) / 2));
  }
  return (k - 1) / 2;
}

}  // namespace

SpatialConv2d::SpatialConv2d(const Conv2d& whole, GroupComm& group)
    : Layer(whole.name()),
      group_(group),
      in_channels_(whole.in_channels()),
      out_channels_(whole.out_channels()),
      kernel_(whole.kernel()),
      halo_(same_padding_halo(whole)),
      has_bias_(whole.has_bias()),
      conv_(whole.name(), in_channels_, out_channels_, kernel_, /*stride=*/1, /*padding=*/0,
            has_bias_) {}

std::string SpatialConv2d::describe() const {
  return fmt::format("SpatialConv2d({} -> {}, {}x{}, halo {} rows, {} ranks{})", in_channels_,
                     out_channels_, kernel_, kernel_, halo_, group_.size(),
                     has_bias_ ? "" : ", no bias");
}

std::unique_ptr<Layer> SpatialConv2d::clone() const {
  const Conv2d whole(name(), in_channels_, out_channels_, kernel_, 1, halo_, has_bias_);
  return std::make_unique<SpatialConv2d>(whole, group_);
}

tensor::Shape SpatialConv2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4 || input[1] != in_channels_) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, {}, h, W], got {}", name(),
                                 describe(), in_channels_, tensor::batch_shape_str(input)));
  }
  if (group_.size() > 1 && input[2] < halo_) {
    throw ShapeError(fmt::format(
        "layer {} ({}): a band of {} rows cannot fill the {}-row halo of its neighbour; use fewer "
        "ranks or larger images",
        name(), describe(), input[2], halo_));
  }
  return {input[0], out_channels_, input[2], input[3]};
}

const tensor::Tensor& SpatialConv2d::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  output_shape(x.shape());  // the band fits the layer and the halo
  const std::int64_t b = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const std::int64_t p = halo_, planes = b * c;
  const std::int64_t hp = h + 2 * p, wp = w + 2 * p;
  x_ext_.ensure_shape({b, c, hp, wp});
  const float* src = x.data();
  float* ext = x_ext_.data();
  if (p > 0) {
    const std::int64_t halo_count = planes * p * w;
    for (tensor::Tensor* t : {&send_up_, &send_down_, &recv_up_, &recv_down_}) {
      t->ensure_shape({planes, p, w});
    }
    recv_up_.zero();  // the image's top and bottom zero padding on the edge ranks
    recv_down_.zero();
    pack_rows(src, planes, h, w, 0, p, send_up_.data());
    pack_rows(src, planes, h, w, h - p, p, send_down_.data());
    exchange_halos(group_, send_up_.data(), recv_up_.data(), send_down_.data(), recv_down_.data(),
                   halo_count);
  }
  // x_ext row i of a plane: halo from above (i < p), the band (p <= i < p + h), halo from below.
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    for (std::int64_t i = 0; i < hp; ++i) {
      float* row = ext + (plane * hp + i) * wp;
      const float* from = nullptr;
      if (i < p) {
        from = recv_up_.data() + (plane * p + i) * w;
      } else if (i < p + h) {
        from = src + (plane * h + i - p) * w;
      } else {
        from = recv_down_.data() + (plane * p + i - p - h) * w;
      }
      std::fill(row, row + p, 0.0f);
      std::copy(from, from + w, row + p);
      std::fill(row + p + w, row + wp, 0.0f);
    }
  }
  return conv_.forward(x_ext_, ctx);
}

const tensor::Tensor& SpatialConv2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  const tensor::Tensor& dx_ext = conv_.backward(dy, need_input_grad);
  if (!need_input_grad) return none_;
  const std::int64_t b = x_ext_.dim(0), c = x_ext_.dim(1);
  const std::int64_t hp = x_ext_.dim(2), wp = x_ext_.dim(3);
  const std::int64_t p = halo_, h = hp - 2 * p, w = wp - 2 * p, planes = b * c;
  dx_.ensure_shape({b, c, h, w});
  const float* ext = dx_ext.data();
  float* dx = dx_.data();
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    for (std::int64_t i = 0; i < h; ++i) {
      const float* from = ext + (plane * hp + p + i) * wp + p;
      std::copy(from, from + w, dx + (plane * h + i) * w);
    }
  }
  if (p > 0) {
    // The gradients of this rank's halo rows belong to the neighbours' boundary rows.
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      for (std::int64_t i = 0; i < p; ++i) {
        const float* top = ext + (plane * hp + i) * wp + p;
        const float* bottom = ext + (plane * hp + p + h + i) * wp + p;
        std::copy(top, top + w, send_up_.data() + (plane * p + i) * w);
        std::copy(bottom, bottom + w, send_down_.data() + (plane * p + i) * w);
      }
    }
    const int rank = group_.rank();
    exchange_halos(group_, send_up_.data(), recv_up_.data(), send_down_.data(), recv_down_.data(),
                   planes * p * w);
    if (rank > 0) add_rows(recv_up_.data(), planes, p, w, dx, h, w, 0, 0);
    if (rank + 1 < group_.size()) add_rows(recv_down_.data(), planes, p, w, dx, h, w, h - p, 0);
  }
  return dx_;
}

}  // namespace dtrain::nn
