#include "dtrain/nn/max_pool2d.h"

#include <algorithm>
#include <bit>
#include <cstdint>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

// Planes per thread below which a second thread costs more than it saves (a 28x28 plane is ~1 us).
constexpr std::int64_t kPlaneGrain = 16;

std::string batch_shape_str(const tensor::Shape& shape) {
  if (shape.empty()) return "[] (a scalar)";
  std::string text = "[B";
  for (std::size_t i = 1; i < shape.size(); ++i) text += fmt::format(", {}", shape[i]);
  return text + "]";
}

// Folds candidate v (at flat index at) into the running maximum: v replaces best when v > best, or
// when v is NaN and best is not (a NaN already taken stays). Selected with bit masks rather than
// branches: with random data a branch here mispredicts about half the time.
inline void fold(float v, std::int32_t at, float& best, std::int32_t& best_at) {
  const bool take = (v > best) | ((v != v) & (best == best));
  const std::uint32_t mask = 0u - static_cast<std::uint32_t>(take);
  best = std::bit_cast<float>((std::bit_cast<std::uint32_t>(v) & mask) |
                              (std::bit_cast<std::uint32_t>(best) & ~mask));
  best_at = static_cast<std::int32_t>((static_cast<std::uint32_t>(at) & mask) |
                                      (static_cast<std::uint32_t>(best_at) & ~mask));
}

// One (H, W) plane -> (OH, OW) maxima and their flat indices, any K and S; windows in row-major
// order, so the first maximum wins. Cost: OH*OW*K*K compares.
void pool_plane(const float* in, std::int64_t width, std::int64_t kernel, std::int64_t stride,
                std::int64_t oh_count, std::int64_t ow_count, float* out, std::int32_t* out_arg) {
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    for (std::int64_t ow = 0; ow < ow_count; ++ow) {
      const std::int64_t corner = oh * stride * width + ow * stride;
      auto best = static_cast<std::int32_t>(corner);
      float best_value = in[corner];
      for (std::int64_t i = 0; i < kernel; ++i) {
        for (std::int64_t j = 0; j < kernel; ++j) {
          const std::int64_t at = corner + i * width + j;
          fold(in[at], static_cast<std::int32_t>(at), best_value, best);
        }
      }
      out[oh * ow_count + ow] = best_value;
      out_arg[oh * ow_count + ow] = best;
    }
  }
}

// The 2x2 stride-2 window of LeNet and most CNNs, unrolled: the four candidates in row-major order
// (top-left, top-right, bottom-left, bottom-right), three compare-and-blend steps per output.
void pool_plane_2x2(const float* in, std::int64_t width, std::int64_t oh_count,
                    std::int64_t ow_count, float* out, std::int32_t* out_arg) {
  const auto w = static_cast<std::int32_t>(width);
  for (std::int64_t oh = 0; oh < oh_count; ++oh) {
    const float* top = in + 2 * oh * width;
    const float* bottom = top + width;
    float* out_row = out + oh * ow_count;
    std::int32_t* arg_row = out_arg + oh * ow_count;
    const auto row_base = static_cast<std::int32_t>(2 * oh * width);
    for (std::int64_t ow = 0; ow < ow_count; ++ow) {
      const std::int32_t at_a = row_base + 2 * static_cast<std::int32_t>(ow);
      std::int32_t best = at_a;
      float best_value = top[2 * ow];
      fold(top[2 * ow + 1], at_a + 1, best_value, best);
      fold(bottom[2 * ow], at_a + w, best_value, best);
      fold(bottom[2 * ow + 1], at_a + w + 1, best_value, best);
      out_row[ow] = best_value;
      arg_row[ow] = best;
    }
  }
}

}  // namespace

MaxPool2d::MaxPool2d(std::string name, std::int64_t kernel, std::int64_t stride)
    : Layer(std::move(name)), kernel_(kernel), stride_(stride) {
  if (kernel_ <= 0 || stride_ <= 0) {
    throw ConfigError(
        fmt::format("layer {}: MaxPool2d needs kernel > 0 and stride > 0, got {} and {}",
                    this->name(), kernel_, stride_));
  }
}

std::string MaxPool2d::describe() const {
  return fmt::format("MaxPool2d({}x{}, stride {})", kernel_, kernel_, stride_);
}

tensor::Shape MaxPool2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4) {
    throw ShapeError(fmt::format("layer {} ({}) expects input [B, C, H, W], got {}", name(),
                                 describe(), batch_shape_str(input)));
  }
  if (input[2] < kernel_ || input[3] < kernel_) {
    throw ShapeError(fmt::format(
        "layer {} ({}): window {}x{} is larger than the input {}x{} of input {}; use a larger "
        "input or fewer downsampling layers before it",
        name(), describe(), kernel_, kernel_, input[2], input[3], batch_shape_str(input)));
  }
  return {input[0], input[1], (input[2] - kernel_) / stride_ + 1,
          (input[3] - kernel_) / stride_ + 1};
}

const tensor::Tensor& MaxPool2d::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  DTRAIN_CHECK_LE(x.dim(2) * x.dim(3), std::int64_t{INT32_MAX});
  input_shape_ = x.shape();
  y_.ensure_shape(out_shape);
  const std::int64_t planes = out_shape[0] * out_shape[1];
  const std::int64_t height = x.dim(2), width = x.dim(3);
  const std::int64_t oh_count = out_shape[2], ow_count = out_shape[3];
  argmax_.resize(static_cast<std::size_t>(planes * oh_count * ow_count));
  const float* xd = x.data();
  float* yd = y_.data();
  std::int32_t* arg = argmax_.data();
  const std::int64_t kernel = kernel_, stride = stride_;
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const float* in = xd + plane * height * width;
      float* out = yd + plane * oh_count * ow_count;
      std::int32_t* out_arg = arg + plane * oh_count * ow_count;
      if (kernel == 2 && stride == 2) {
        pool_plane_2x2(in, width, oh_count, ow_count, out, out_arg);
      } else {
        pool_plane(in, width, kernel, stride, oh_count, ow_count, out, out_arg);
      }
    }
  });
  return y_;
}

const tensor::Tensor& MaxPool2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  dx_.ensure_shape(input_shape_);
  const std::int64_t planes = input_shape_[0] * input_shape_[1];
  const std::int64_t plane_in = input_shape_[2] * input_shape_[3];
  const std::int64_t plane_out = dy.dim(2) * dy.dim(3);
  const float* g = dy.data();
  float* dx = dx_.data();
  const std::int32_t* arg = argmax_.data();
  compute_pool().parallel_for(planes, kPlaneGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      float* out = dx + plane * plane_in;
      std::fill(out, out + plane_in, 0.0f);
      const float* in = g + plane * plane_out;
      const std::int32_t* in_arg = arg + plane * plane_out;
      for (std::int64_t o = 0; o < plane_out; ++o) out[in_arg[o]] += in[o];
    }
  });
  return dx_;
}

}  // namespace dtrain::nn
