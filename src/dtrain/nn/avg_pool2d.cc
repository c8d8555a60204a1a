#include "dtrain/nn/avg_pool2d.h"

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kPlaneGrain = 16;

}  // namespace

AvgPool2d::AvgPool2d(std::string name, std::int64_t kernel, std::int64_t stride)
    : Layer(std::move(name)), kernel_(kernel), stride_(stride) {
  if (kernel_ <= 0 || stride_ <= 0) {
    throw ConfigError(
        fmt::format("layer {}: AvgPool2d needs kernel > 0 and stride > 0, got {} and {}",
                    this->name(), kernel_, stride_));
  }
}

std::unique_ptr<AvgPool2d> AvgPool2d::global(std::string name) {
  auto pool = std::make_unique<AvgPool2d>(std::move(name), 1, 1);
  pool->kernel_ = 0;
  return pool;
}

std::string AvgPool2d::describe() const {
  if (is_global()) return "AvgPool2d(global)";
  return fmt::format("AvgPool2d({}x{}, stride {})", kernel_, kernel_, stride_);
}

tensor::Shape AvgPool2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, C, H, W], got {}", name(),
                                 describe(), tensor::batch_shape_str(input)));
  }
  if (input[2] <= 0 || input[3] <= 0 || input[2] < window_h(input[2]) ||
      input[3] < window_w(input[3])) {
    throw ShapeError(fmt::format(
        "layer {} ({}): window {}x{} does not fit the input {}x{} of input {}; use a larger input "
        "or fewer downsampling layers before it",
        name(), describe(), window_h(input[2]), window_w(input[3]), input[2], input[3],
        tensor::batch_shape_str(input)));
  }
  if (is_global()) return {input[0], input[1], 1, 1};
  return {input[0], input[1], (input[2] - kernel_) / stride_ + 1,
          (input[3] - kernel_) / stride_ + 1};
}

const tensor::Tensor& AvgPool2d::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  input_shape_ = x.shape();
  y_.ensure_shape(out_shape);
  const std::int64_t planes = out_shape[0] * out_shape[1];
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t kh = window_h(height), kw = window_w(width);
  const std::int64_t stride = is_global() ? 1 : stride_;
  const std::int64_t oh_count = out_shape[2], ow_count = out_shape[3];
  const float scale = 1.0f / static_cast<float>(kh * kw);
  const float* xd = x.data();
  float* yd = y_.data();
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* in = xd + plane * height * width;
      float* out = yd + plane * oh_count * ow_count;
      for (std::int64_t oh = 0; oh < oh_count; ++oh) {
        for (std::int64_t ow = 0; ow < ow_count; ++ow) {
          float sum = 0.0f;
          for (std::int64_t i = 0; i < kh; ++i) {
            const float* row = in + (oh * stride + i) * width + ow * stride;
            for (std::int64_t j = 0; j < kw; ++j) sum += row[j];
          }
          out[oh * ow_count + ow] = sum * scale;
        }
      }
    }
  });
  return y_;
}

const tensor::Tensor& AvgPool2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  dx_.ensure_shape(input_shape_);
  const std::int64_t planes = input_shape_[0] * input_shape_[1];
  const std::int64_t height = input_shape_[2], width = input_shape_[3];
  const std::int64_t kh = window_h(height), kw = window_w(width);
  const std::int64_t stride = is_global() ? 1 : stride_;
  const std::int64_t oh_count = dy.dim(2), ow_count = dy.dim(3);
  const float scale = 1.0f / static_cast<float>(kh * kw);
  const float* g = dy.data();
  float* dx = dx_.data();
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      float* out = dx + plane * height * width;
      std::fill(out, out + height * width, 0.0f);
      const float* in = g + plane * oh_count * ow_count;
      for (std::int64_t oh = 0; oh < oh_count; ++oh) {
        for (std::int64_t ow = 0; ow < ow_count; ++ow) {
          const float share = in[oh * ow_count + ow] * scale;
          for (std::int64_t i = 0; i < kh; ++i) {
            float* row = out + (oh * stride + i) * width + ow * stride;
            for (std::int64_t j = 0; j < kw; ++j) row[j] += share;
          }
        }
      }
    }
  });
  return dx_;
}

std::unique_ptr<Layer> AvgPool2d::clone() const {
  auto pool = std::make_unique<AvgPool2d>(name(), 1, 1);
  pool->kernel_ = kernel_;
  pool->stride_ = stride_;
  return pool;
}

}  // namespace dtrain::nn
