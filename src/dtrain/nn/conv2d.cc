#include "dtrain/nn/conv2d.h"

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::nn {
namespace {

// Below this many floats moved per pass, waking a second thread costs more than it saves.
constexpr std::int64_t kParallelGrain = 1 << 14;
// Target size of one chunk's cols: 256 KB, inside a core's L2 (see conv2d.h).
constexpr std::int64_t kChunkFloats = 1 << 16;

std::string batch_shape_str(const tensor::Shape& shape) {
  if (shape.empty()) return "[] (a scalar)";
  std::string text = "[B";
  for (std::size_t i = 1; i < shape.size(); ++i) text += fmt::format(", {}", shape[i]);
  return text + "]";
}

}  // namespace

Conv2d::Conv2d(std::string name, std::int64_t in_channels, std::int64_t out_channels,
               std::int64_t kernel, std::int64_t stride, std::int64_t padding, bool bias,
               InitKind init, float sigma)
    : Layer(std::move(name)),
      in_channels_(in_channels),
      out_channels_(out_channels),
      kernel_(kernel),
      stride_(stride),
      padding_(padding),
      has_bias_(bias),
      init_kind_(init),
      sigma_(sigma) {
  if (in_channels_ <= 0 || out_channels_ <= 0 || kernel_ <= 0 || stride_ <= 0 || padding_ < 0) {
    throw ConfigError(fmt::format(
        "layer {}: Conv2d needs positive channels, kernel and stride and padding >= 0, got {}",
        this->name(), describe()));
  }
}

std::string Conv2d::describe() const {
  return fmt::format("Conv2d({} -> {}, {}x{}, stride {}, pad {}{})", in_channels_, out_channels_,
                     kernel_, kernel_, stride_, padding_, has_bias_ ? "" : ", no bias");
}

tensor::Shape Conv2d::output_shape(const tensor::Shape& input) const {
  if (input.size() != 4 || input[1] != in_channels_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, {}, H, W], got {}; check the previous layer's output or "
        "the model input shape",
        name(), describe(), in_channels_, batch_shape_str(input)));
  }
  const std::int64_t padded_h = input[2] + 2 * padding_;
  const std::int64_t padded_w = input[3] + 2 * padding_;
  if (padded_h < kernel_ || padded_w < kernel_) {
    throw ShapeError(fmt::format(
        "layer {} ({}): kernel {}x{} is larger than the padded input {}x{} of input {}; use a "
        "larger input, more padding or fewer downsampling layers before it",
        name(), describe(), kernel_, kernel_, padded_h, padded_w, batch_shape_str(input)));
  }
  return {input[0], out_channels_, (padded_h - kernel_) / stride_ + 1,
          (padded_w - kernel_) / stride_ + 1};
}

void Conv2d::declare(ParamStore& store) {
  weight_index_ =
      store.add_param(name() + ".weight", {out_channels_, in_channels_, kernel_, kernel_},
                      /*weight_decay=*/true);
  if (has_bias_) {
    bias_index_ = store.add_param(name() + ".bias", {out_channels_}, /*weight_decay=*/false);
  }
}

void Conv2d::bind(ParamStore& store) {
  weight_ = store.param(weight_index_);
  weight_grad_ = store.grad(weight_index_);
  if (has_bias_) {
    bias_ = store.param(bias_index_);
    bias_grad_ = store.grad(bias_index_);
  }
}

void Conv2d::init(Rng& rng) {
  const std::int64_t area = kernel_ * kernel_;
  init_weights(weight_, in_channels_ * area, out_channels_ * area, init_kind_, sigma_, rng);
  if (has_bias_) bias_.zero();
}

std::int64_t Conv2d::chunk_images(std::int64_t batch) const {
  const std::int64_t per_image = geometry_.col_rows() * geometry_.col_cols();
  return std::clamp<std::int64_t>(kChunkFloats / std::max<std::int64_t>(per_image, 1), 1,
                                  std::max<std::int64_t>(batch, 1));
}

void Conv2d::for_each_image(std::int64_t begin, std::int64_t end, std::int64_t floats_per_image,
                            const std::function<void(std::int64_t)>& fn) {
  const std::int64_t count = end - begin;
  const std::int64_t grain =
      std::max<std::int64_t>(1, kParallelGrain / std::max<std::int64_t>(floats_per_image, 1));
  compute_pool().parallel_for(count, grain, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t i = first; i < last; ++i) fn(begin + i);
  });
}

const tensor::Tensor& Conv2d::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  x_ = x;
  input_shape_ = x.shape();
  geometry_ =
      tensor::ConvGeometry{in_channels_, x.dim(2), x.dim(3), kernel_, kernel_, stride_, padding_};
  const std::int64_t batch = x.dim(0);
  const std::int64_t rows = geometry_.col_rows();    // R = C*K*K
  const std::int64_t pixels = geometry_.col_cols();  // Q = OH*OW
  const std::int64_t image_size = in_channels_ * geometry_.height * geometry_.width;
  const std::int64_t chunk = chunk_images(batch);
  cols_.ensure_shape({chunk, rows, pixels});
  y_.ensure_shape(out_shape);
  const float* xd = x.data();
  const float* bias = has_bias_ ? bias_.data() : nullptr;
  float* y = y_.data();
  float* cols = cols_.data();
  for (std::int64_t begin = 0; begin < batch; begin += chunk) {
    const std::int64_t end = std::min(batch, begin + chunk);
    for_each_image(begin, end, rows * pixels, [&](std::int64_t b) {
      tensor::im2col(geometry_, xd + b * image_size, cols + (b - begin) * rows * pixels);
      if (bias == nullptr) return;
      for (std::int64_t f = 0; f < out_channels_; ++f) {
        float* out = y + (b * out_channels_ + f) * pixels;
        std::fill(out, out + pixels, bias[f]);
      }
    });
    for (std::int64_t b = begin; b < end; ++b) {
      tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, out_channels_, pixels, rows, 1.0f,
                   weight_.data(), rows, cols + (b - begin) * rows * pixels, pixels,
                   bias != nullptr ? 1.0f : 0.0f, y + b * out_channels_ * pixels, pixels);
    }
  }
  return y_;
}

const tensor::Tensor& Conv2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t batch = input_shape_.at(0);
  const std::int64_t rows = geometry_.col_rows();
  const std::int64_t pixels = geometry_.col_cols();
  const std::int64_t image_size = in_channels_ * geometry_.height * geometry_.width;
  const std::int64_t chunk = chunk_images(batch);
  const float* g = dy.data();

  if (has_bias_) {
    // db[f] += sum over images and pixels of dy[b, f, :], each plane summed in 8 float lanes (a
    // fixed order the compiler can vectorise) and the planes in double.
    float* db = bias_grad_.data();
    compute_pool().parallel_for(out_channels_, 1, [&](std::int64_t f_begin, std::int64_t f_end) {
      for (std::int64_t f = f_begin; f < f_end; ++f) {
        double sum = 0.0;
        for (std::int64_t b = 0; b < batch; ++b) {
          const float* plane = g + (b * out_channels_ + f) * pixels;
          float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
          std::int64_t p = 0;
          for (; p + 8 <= pixels; p += 8) {
            for (int l = 0; l < 8; ++l) lanes[l] += plane[p + l];
          }
          for (; p < pixels; ++p) lanes[0] += plane[p];
          for (float lane : lanes) sum += lane;
        }
        db[f] += static_cast<float>(sum);
      }
    });
  }

  if (need_input_grad) {
    dx_.ensure_shape(input_shape_);
    dcols_.ensure_shape({chunk, rows, pixels});
  }
  const float* xd = x_.data();
  float* cols = cols_.data();
  float* dcols = dcols_.data();
  float* dx = dx_.data();
  for (std::int64_t begin = 0; begin < batch; begin += chunk) {
    const std::int64_t end = std::min(batch, begin + chunk);
    for_each_image(begin, end, rows * pixels, [&](std::int64_t b) {
      tensor::im2col(geometry_, xd + b * image_size, cols + (b - begin) * rows * pixels);
    });
    for (std::int64_t b = begin; b < end; ++b) {
      const float* dy_b = g + b * out_channels_ * pixels;
      tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, out_channels_, rows, pixels, 1.0f, dy_b,
                   pixels, cols + (b - begin) * rows * pixels, pixels, 1.0f, weight_grad_.data(),
                   rows);
      if (!need_input_grad) continue;
      tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, rows, pixels, out_channels_, 1.0f,
                   weight_.data(), rows, dy_b, pixels, 0.0f, dcols + (b - begin) * rows * pixels,
                   pixels);
    }
    if (!need_input_grad) continue;
    for_each_image(begin, end, rows * pixels, [&](std::int64_t b) {
      float* image = dx + b * image_size;
      std::fill(image, image + image_size, 0.0f);
      tensor::col2im(geometry_, dcols + (b - begin) * rows * pixels, image);
    });
  }
  return need_input_grad ? dx_ : none_;
}

}  // namespace dtrain::nn
