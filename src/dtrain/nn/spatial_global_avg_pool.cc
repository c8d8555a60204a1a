#include "dtrain/nn/spatial_global_avg_pool.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {

SpatialGlobalAvgPool::SpatialGlobalAvgPool(std::string name, GroupComm& group)
    : Layer(std::move(name)), group_(group) {}

std::string SpatialGlobalAvgPool::describe() const {
  return fmt::format("SpatialGlobalAvgPool(band sums allreduced over {} ranks)", group_.size());
}

std::unique_ptr<Layer> SpatialGlobalAvgPool::clone() const {
  return std::make_unique<SpatialGlobalAvgPool>(name(), group_);
}

tensor::Shape SpatialGlobalAvgPool::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, C, h, W], got {}", name(),
                                 describe(), tensor::batch_shape_str(input)));
  }
  return {input[0], input[1], 1, 1};
}

const tensor::Tensor& SpatialGlobalAvgPool::forward(const tensor::Tensor& x,
                                                    const ForwardContext& /*ctx*/) {
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  y_.ensure_shape(output_shape(x.shape()));
  input_shape_ = x.shape();
  const std::int64_t planes = x.dim(0) * x.dim(1), area = x.dim(2) * x.dim(3);
  const float* in = x.data();
  float* sums = y_.data();
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    float sum = 0.0f;
    for (std::int64_t i = 0; i < area; ++i) sum += in[plane * area + i];
    sums[plane] = sum;
  }
  group_.allreduce_sum(sums, planes);
  const float scale = 1.0f / static_cast<float>(area * group_.size());
  for (std::int64_t plane = 0; plane < planes; ++plane) sums[plane] *= scale;
  return y_;
}

const tensor::Tensor& SpatialGlobalAvgPool::backward(const tensor::Tensor& dy,
                                                     bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  dx_.ensure_shape(input_shape_);
  const std::int64_t planes = input_shape_[0] * input_shape_[1];
  const std::int64_t area = input_shape_[2] * input_shape_[3];
  const float scale = 1.0f / static_cast<float>(area * group_.size());
  const float* g = dy.data();
  float* dx = dx_.data();
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    std::fill(dx + plane * area, dx + (plane + 1) * area, g[plane] * scale);
  }
  return dx_;
}

}  // namespace dtrain::nn
