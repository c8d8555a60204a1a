#include "dtrain/nn/spatial_gather.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {

SpatialGather::SpatialGather(std::string name, GroupComm& group)
    : Layer(std::move(name)), group_(group) {}

std::string SpatialGather::describe() const {
  return fmt::format("SpatialGather({} bands)", group_.size());
}

std::unique_ptr<Layer> SpatialGather::clone() const {
  return std::make_unique<SpatialGather>(name(), group_);
}

tensor::Shape SpatialGather::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4) {
    throw ShapeError(fmt::format("layer {} ({}) expects bands [B, C, h, W], got {}", name(),
                                 describe(), tensor::batch_shape_str(input)));
  }
  return {input[0], input[1], input[2] * group_.size(), input[3]};
}

const tensor::Tensor& SpatialGather::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  (void)ctx;
  input_shape_ = x.shape();
  const tensor::Shape out = output_shape(x.shape());
  const int ranks = group_.size();
  const std::int64_t planes = x.dim(0) * x.dim(1);
  const std::int64_t band = x.dim(2) * x.dim(3);  // floats of one plane's band
  const std::int64_t count = x.numel();
  y_.ensure_shape(out);
  if (ranks == 1) {
    std::copy(x.data(), x.data() + count, y_.data());
    return y_;
  }
  gathered_.resize(static_cast<std::size_t>(count * ranks));
  group_.allgather(x.data(), gathered_.data(), count);
  float* y = y_.data();
  for (int r = 0; r < ranks; ++r) {
    const float* from = gathered_.data() + std::int64_t{r} * count;
    for (std::int64_t plane = 0; plane < planes; ++plane) {
      std::copy(from + plane * band, from + (plane + 1) * band, y + (plane * ranks + r) * band);
    }
  }
  return y_;
}

const tensor::Tensor& SpatialGather::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  const int ranks = group_.size();
  const int r = group_.rank();
  const std::int64_t planes = input_shape_[0] * input_shape_[1];
  const std::int64_t band = input_shape_[2] * input_shape_[3];
  dx_.ensure_shape(input_shape_);
  const float* from = dy.data();
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float* src = from + (plane * ranks + r) * band;
    std::copy(src, src + band, dx_.data() + plane * band);
  }
  return dx_;
}

}  // namespace dtrain::nn
