#include "dtrain/nn/spatial_conv2d.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/nn/halo_exchange.h"

namespace dtrain::nn {

namespace {

// `whole`, or ConfigError when its output band would not be rows [r h / S, (r + 1) h / S).
const Conv2d& splittable(const Conv2d& whole) {
  if (!SpatialConv2d::splits_along_rows(whole)) {
    throw ConfigError(fmt::format(
        "layer {} ({}): spatial parallelism splits convolutions whose output has H / S rows, "
        "K - S <= 2 x padding < K (here kernel {}, stride {}, padding {}); stride 1 needs padding "
        "(K - 1) / 2 with K odd",
        whole.name(), whole.describe(), whole.kernel(), whole.stride(), whole.padding()));
  }
  return whole;
}

// Copies rows [row_begin, row_begin + rows) of every plane of `from` (planes, from_rows,
// from_width), columns [column, column + width), into `to` (planes, rows, width), contiguous.
void copy_rows(const float* from, std::int64_t planes, std::int64_t from_rows,
               std::int64_t from_width, std::int64_t row_begin, std::int64_t rows,
               std::int64_t column, std::int64_t width, float* to) {
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    for (std::int64_t i = 0; i < rows; ++i) {
      const float* src = from + (plane * from_rows + row_begin + i) * from_width + column;
      std::copy(src, src + width, to + (plane * rows + i) * width);
    }
  }
}

}  // namespace

bool SpatialConv2d::splits_along_rows(const Conv2d& whole) {
  const std::int64_t k = whole.kernel(), s = whole.stride(), p = whole.padding();
  return k - s <= 2 * p && 2 * p < k;
}

SpatialConv2d::SpatialConv2d(const Conv2d& whole, GroupComm& group)
    : Layer(whole.name()),
      group_(group),
      in_channels_(whole.in_channels()),
      out_channels_(whole.out_channels()),
      kernel_(splittable(whole).kernel()),
      stride_(whole.stride()),
      padding_(whole.padding()),
      top_(padding_),
      bottom_(std::max<std::int64_t>(0, kernel_ - padding_ - stride_)),
      has_bias_(whole.has_bias()),
      conv_(whole.name(), in_channels_, out_channels_, kernel_, stride_, /*padding=*/0, has_bias_) {
}

std::string SpatialConv2d::describe() const {
  return fmt::format("SpatialConv2d({} -> {}, {}x{}, stride {}, halo {} + {} rows, {} ranks{})",
                     in_channels_, out_channels_, kernel_, kernel_, stride_, top_, bottom_,
                     group_.size(), has_bias_ ? "" : ", no bias");
}

std::unique_ptr<Layer> SpatialConv2d::clone() const {
  const Conv2d whole(name(), in_channels_, out_channels_, kernel_, stride_, padding_, has_bias_);
  return std::make_unique<SpatialConv2d>(whole, group_);
}

tensor::Shape SpatialConv2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4 || input[1] != in_channels_) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, {}, h, W], got {}", name(),
                                 describe(), in_channels_, tensor::batch_shape_str(input)));
  }
  if (input[2] % stride_ != 0) {
    throw ShapeError(fmt::format(
        "layer {} ({}): a band of {} rows is not a multiple of the stride {}; use a number of "
        "ranks for which the rows divide",
        name(), describe(), input[2], stride_));
  }
  if (group_.size() > 1 && input[2] < std::max(top_, bottom_)) {
    throw ShapeError(fmt::format(
        "layer {} ({}): a band of {} rows cannot fill the {}-row halo of its neighbour; use fewer "
        "ranks or larger images",
        name(), describe(), input[2], std::max(top_, bottom_)));
  }
  const std::int64_t width = (input[3] + 2 * padding_ - kernel_) / stride_ + 1;
  return {input[0], out_channels_, input[2] / stride_, width};
}

const tensor::Tensor& SpatialConv2d::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  output_shape(x.shape());  // the band fits the layer, the stride and the halo
  // No halo and no padding (a 1x1 projection): the extended band is the band itself.
  direct_ = top_ == 0 && bottom_ == 0 && padding_ == 0;
  if (direct_) return conv_.forward(x, ctx);
  const std::int64_t c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const std::int64_t planes = x.dim(0) * c, p = padding_, t = top_, b = bottom_;
  const std::int64_t he = t + h + b, we = w + 2 * p;
  x_ext_.ensure_shape({x.dim(0), c, he, we});
  const auto buffer =
      static_cast<std::size_t>(std::max<std::int64_t>(1, planes * std::max(t, b) * w));
  for (std::vector<float>* v : {&send_up_, &send_down_, &recv_up_, &recv_down_}) v->resize(buffer);
  // Zeros stay where no neighbour sends: the image's own top and bottom padding.
  std::fill(recv_up_.begin(), recv_up_.end(), 0.0f);
  std::fill(recv_down_.begin(), recv_down_.end(), 0.0f);
  const float* src = x.data();
  if (t + b > 0) {
    // Rank r - 1 needs this band's top b rows, rank r + 1 its bottom t rows.
    pack_rows(src, planes, h, w, 0, b, send_up_.data());
    pack_rows(src, planes, h, w, h - t, t, send_down_.data());
    exchange_halos(group_, {send_up_.data(), planes * b * w, recv_up_.data(), planes * t * w},
                   {send_down_.data(), planes * t * w, recv_down_.data(), planes * b * w});
  }
  // x_ext row i of a plane: halo from above (i < t), the band (t <= i < t + h), halo from below.
  float* ext = x_ext_.data();
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    for (std::int64_t i = 0; i < he; ++i) {
      float* row = ext + (plane * he + i) * we;
      const float* from = nullptr;
      if (i < t) {
        from = recv_up_.data() + (plane * t + i) * w;
      } else if (i < t + h) {
        from = src + (plane * h + i - t) * w;
      } else {
        from = recv_down_.data() + (plane * b + i - t - h) * w;
      }
      std::fill(row, row + p, 0.0f);
      std::copy(from, from + w, row + p);
      std::fill(row + p + w, row + we, 0.0f);
    }
  }
  return conv_.forward(x_ext_, ctx);
}

const tensor::Tensor& SpatialConv2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  const tensor::Tensor& dx_ext = conv_.backward(dy, need_input_grad);
  if (!need_input_grad) return none_;
  if (direct_) return dx_ext;
  const std::int64_t c = x_ext_.dim(1), he = x_ext_.dim(2), we = x_ext_.dim(3);
  const std::int64_t p = padding_, t = top_, b = bottom_;
  const std::int64_t h = he - t - b, w = we - 2 * p, planes = x_ext_.dim(0) * c;
  dx_.ensure_shape({x_ext_.dim(0), c, h, w});
  const float* ext = dx_ext.data();
  float* dx = dx_.data();
  copy_rows(ext, planes, he, we, t, h, p, w, dx);
  if (t + b > 0) {
    // The gradients of this band's halo rows belong to the neighbours' boundary rows: the top t
    // rows' to rank r - 1 (its bottom t rows), the bottom b rows' to rank r + 1 (its top b rows).
    copy_rows(ext, planes, he, we, 0, t, p, w, send_up_.data());
    copy_rows(ext, planes, he, we, t + h, b, p, w, send_down_.data());
    exchange_halos(group_, {send_up_.data(), planes * t * w, recv_up_.data(), planes * b * w},
                   {send_down_.data(), planes * b * w, recv_down_.data(), planes * t * w});
    const int rank = group_.rank();
    if (rank > 0) add_rows(recv_up_.data(), planes, b, w, dx, h, w, 0, 0);
    if (rank + 1 < group_.size()) add_rows(recv_down_.data(), planes, t, w, dx, h, w, h - t, 0);
  }
  return dx_;
}

}  // namespace dtrain::nn
