#include "dtrain/nn/conv2d.h"

#include <algorithm>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/conv_direct.h"
#include "dtrain/tensor/elementwise.h"
#include "dtrain/tensor/gemm_serial.h"
#include "dtrain/tensor/im2col_padded.h"
#include "dtrain/tensor/im2col_strided.h"

namespace dtrain::nn {
namespace {

// Below this many cols floats per image part, waking a second thread costs more than it saves.
constexpr std::int64_t kParallelGrain = 1 << 14;

// The sum of one (OH*OW) plane of dy, in 8 float lanes (lane l adds elements l, l + 8, ...; the
// remainder goes to lane 0), returned in double so that summing over the batch loses nothing. With
// AVX the lanes are one register (GCC 12 turns the portable loop into scalar adds through integer
// registers, 2 us per LeNet conv1 image); both forms add in the same order, so give the same bits.
double plane_sum(const float* plane, std::int64_t pixels) {
  float lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  std::int64_t p = 0;
#if defined(__AVX__)
  __m256 sum = _mm256_setzero_ps();
  for (; p + 8 <= pixels; p += 8) sum = _mm256_add_ps(sum, _mm256_loadu_ps(plane + p));
  _mm256_storeu_ps(lanes, sum);
#else
  for (; p + 8 <= pixels; p += 8) {
    for (int l = 0; l < 8; ++l) lanes[l] += plane[p + l];
  }
#endif
  for (; p < pixels; ++p) lanes[0] += plane[p];
  double total = 0.0;
  for (float lane : lanes) total += lane;
  return total;
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
        name(), describe(), in_channels_, tensor::batch_shape_str(input)));
  }
  const std::int64_t padded_h = input[2] + 2 * padding_;
  const std::int64_t padded_w = input[3] + 2 * padding_;
  if (padded_h < kernel_ || padded_w < kernel_) {
    throw ShapeError(fmt::format(
        "layer {} ({}): kernel {}x{} is larger than the padded input {}x{} of input {}; use a "
        "larger input, more padding or fewer downsampling layers before it",
        name(), describe(), kernel_, kernel_, padded_h, padded_w, tensor::batch_shape_str(input)));
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
  if (has_bias_) init_bias(bias_, in_channels_ * area, init_kind_, rng);
}

void Conv2d::lower(const float* image, float* scratch, float* cols) const {
  if (geometry_.stride == 1) {
    tensor::im2col_padded(geometry_, image, scratch, cols);
  } else {
    tensor::im2col_strided(geometry_, image, scratch, cols);
  }
}

std::int64_t Conv2d::scratch_size() const {
  return std::max({tensor::im2col_padded_scratch_size(geometry_),
                   tensor::im2col_strided_scratch_size(geometry_),
                   tensor::conv_direct_scratch_size(geometry_),
                   tensor::conv_direct_scratch_size(input_grad_geometry())});
}

tensor::ConvGeometry Conv2d::input_grad_geometry() const {
  // dy (F, OH, OW) as an image, the flipped kernel, padding K - 1 - P: the output is (C, H, W).
  return tensor::ConvGeometry{
      out_channels_,         geometry_.out_height(), geometry_.out_width(), kernel_, kernel_, 1,
      kernel_ - 1 - padding_};
}

bool Conv2d::input_grad_direct() const {
  return geometry_.stride == 1 && padding_ <= kernel_ - 1 &&
         tensor::conv_direct_supported(input_grad_geometry());
}

int Conv2d::batch_parts(std::int64_t batch) const {
  const std::int64_t moved = batch * geometry_.col_rows() * geometry_.col_cols();
  const std::int64_t parts =
      std::min<std::int64_t>({compute_threads(), batch, moved / kParallelGrain});
  return static_cast<int>(std::max<std::int64_t>(parts, 1));
}

void Conv2d::for_each_part(std::int64_t batch, int parts,
                           const std::function<void(int, std::int64_t, std::int64_t)>& fn) {
  compute_pool().run(parts,
                     [&](int part) { fn(part, batch * part / parts, batch * (part + 1) / parts); });
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
  const int parts = batch_parts(batch);
  const bool direct = tensor::conv_direct_supported(geometry_);
  if (!direct) cols_.ensure_shape({parts, rows, pixels});
  scratch_.ensure_shape({parts, scratch_size()});
  y_.ensure_shape(out_shape);
  const float* xd = x.data();
  const float* w = weight_.data();
  const float* bias = has_bias_ ? bias_.data() : nullptr;
  float* y = y_.data();
  for_each_part(batch, parts, [&](int part, std::int64_t begin, std::int64_t end) {
    float* scratch = scratch_.data() + part * scratch_.dim(1);
    if (direct) {
      for (std::int64_t b = begin; b < end; ++b) {
        tensor::conv_direct_forward(geometry_, out_channels_, w, bias, xd + b * image_size, scratch,
                                    y + b * out_channels_ * pixels);
      }
      return;
    }
    float* cols = cols_.data() + part * rows * pixels;
    for (std::int64_t b = begin; b < end; ++b) {
      float* y_b = y + b * out_channels_ * pixels;
      lower(xd + b * image_size, scratch, cols);
      if (bias != nullptr) {
        for (std::int64_t f = 0; f < out_channels_; ++f) {
          std::fill(y_b + f * pixels, y_b + (f + 1) * pixels, bias[f]);
        }
      }
      tensor::gemm_serial(tensor::Trans::kNo, tensor::Trans::kNo, out_channels_, pixels, rows, 1.0f,
                          w, rows, cols, pixels, bias != nullptr ? 1.0f : 0.0f, y_b, pixels);
    }
  });
  return y_;
}

const tensor::Tensor& Conv2d::backward(const tensor::Tensor& dy, bool need_input_grad) {
  return backward_impl(dy, need_input_grad, nullptr);
}

const tensor::Tensor& Conv2d::backward_add(const tensor::Tensor& dy, const tensor::Tensor& addend) {
  DTRAIN_CHECK(addend.shape() == input_shape_ && addend.is_contiguous(),
               "layer {}: addend shape {} differs from input shape {}", name(),
               tensor::shape_str(addend.shape()), tensor::shape_str(input_shape_));
  DTRAIN_CHECK(addend.data() != dx_.data() || dx_.numel() == 0,
               "layer {}: the addend must not be this layer's own input gradient", name());
  return backward_impl(dy, true, addend.data());
}

const tensor::Tensor& Conv2d::backward_impl(const tensor::Tensor& dy, bool need_input_grad,
                                            const float* addend) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t batch = input_shape_.at(0);
  const std::int64_t filters = out_channels_;
  const std::int64_t rows = geometry_.col_rows();
  const std::int64_t pixels = geometry_.col_cols();
  const std::int64_t image_size = in_channels_ * geometry_.height * geometry_.width;
  const std::int64_t weight_size = filters * rows;
  const int parts = batch_parts(batch);
  const bool direct = tensor::conv_direct_supported(geometry_);
  // Each part sums its images' weight gradients in its own row of part_sums_ first: conv_direct's
  // lanes, or dW^T (R, F) = sum_b cols_b dy_b^T: OpenBLAS 0.3.21 runs that product 20% faster than
  // dW = dy_b cols_b^T at LeNet's conv2 (150 x 16 x 100: 0.75 vs 0.96 ms per 128 images).
  part_sums_.ensure_shape({parts, direct ? weight_size * tensor::kConvDirectLanes : weight_size});
  if (!direct) cols_.ensure_shape({parts, rows, pixels});
  scratch_.ensure_shape({parts, scratch_size()});
  // One part adds its sums straight into the gradient; several add them into partial gradients,
  // added below in part order.
  if (parts > 1) dw_parts_.ensure_shape({parts, weight_size});
  db_parts_.assign(static_cast<std::size_t>(parts * filters), 0.0);
  // The input gradient of a stride-1 layer is a convolution of dy with the flipped kernel:
  //   dx[c, h, w] = sum_{f,i,j} w[f, c, K-1-i, K-1-j] * dy_padded[f, h + i, w + j]
  // with dy padded by K - 1 - P, so conv_direct_forward computes it straight into dx (no dcols, no
  // col2im) where it applies, with weights (C, F, K, K) rearranged here.
  const bool dx_direct = need_input_grad && input_grad_direct();
  if (need_input_grad) {
    dx_.ensure_shape(input_shape_);
    if (dx_direct) {
      flipped_weight_.ensure_shape({in_channels_, filters, kernel_, kernel_});
      const float* w = weight_.data();
      float* flipped = flipped_weight_.data();
      const std::int64_t area = kernel_ * kernel_;
      for (std::int64_t f = 0; f < filters; ++f) {
        for (std::int64_t c = 0; c < in_channels_; ++c) {
          for (std::int64_t t = 0; t < area; ++t) {
            flipped[(c * filters + f) * area + t] = w[(f * in_channels_ + c) * area + area - 1 - t];
          }
        }
      }
    } else {
      dcols_.ensure_shape({parts, rows, pixels});
    }
  }
  const tensor::ConvGeometry dx_geometry = input_grad_geometry();
  const float* g = dy.data();
  const float* xd = x_.data();
  const float* w = weight_.data();
  float* dx = dx_.data();
  for_each_part(batch, parts, [&](int part, std::int64_t begin, std::int64_t end) {
    float* cols = direct ? nullptr : cols_.data() + part * rows * pixels;
    float* dcols = need_input_grad && !dx_direct ? dcols_.data() + part * rows * pixels : nullptr;
    float* scratch = scratch_.data() + part * scratch_.dim(1);
    float* dw = weight_grad_.data();
    if (parts > 1) {
      dw = dw_parts_.data() + part * weight_size;
      std::fill(dw, dw + weight_size, 0.0f);
    }
    double* db = db_parts_.data() + part * filters;
    float* sums = part_sums_.data() + part * part_sums_.dim(1);
    std::fill(sums, sums + part_sums_.dim(1), 0.0f);
    for (std::int64_t b = begin; b < end; ++b) {
      const float* dy_b = g + b * filters * pixels;
      if (direct) {
        tensor::conv_direct_weight_grad(geometry_, filters, dy_b, xd + b * image_size, scratch,
                                        sums);
      } else {
        lower(xd + b * image_size, scratch, cols);
        tensor::gemm_serial(tensor::Trans::kNo, tensor::Trans::kYes, rows, filters, pixels, 1.0f,
                            cols, pixels, dy_b, pixels, 1.0f, sums, filters);
      }
      if (has_bias_) {
        for (std::int64_t f = 0; f < filters; ++f) db[f] += plane_sum(dy_b + f * pixels, pixels);
      }
      if (!need_input_grad) continue;
      const float* addend_b = addend != nullptr ? addend + b * image_size : nullptr;
      if (dx_direct) {
        // The addend is the sums' starting value.
        tensor::conv_direct_forward(dx_geometry, in_channels_, flipped_weight_.data(), nullptr,
                                    dy_b, scratch, dx + b * image_size, addend_b);
        continue;
      }
      tensor::gemm_serial(tensor::Trans::kYes, tensor::Trans::kNo, rows, pixels, filters, 1.0f, w,
                          rows, dy_b, pixels, 0.0f, dcols, pixels);
      float* image = dx + b * image_size;
      if (geometry_.stride == 1) {
        tensor::col2im_padded(geometry_, dcols, scratch, image);
      } else {
        tensor::col2im_strided(geometry_, dcols, scratch, image);
      }
      // Added while the image's dx is still in cache (the bits of tensor::add over the batch).
      if (addend_b != nullptr) tensor::add(image, addend_b, image, image_size);
    }
    if (direct) {
      tensor::conv_direct_reduce_lanes(weight_size, sums, dw);
    } else {
      for (std::int64_t f = 0; f < filters; ++f) {
        for (std::int64_t r = 0; r < rows; ++r) dw[f * rows + r] += sums[r * filters + f];
      }
    }
  });
  if (parts > 1) {
    float* dw = weight_grad_.data();
    for (int part = 0; part < parts; ++part) {
      const float* partial = dw_parts_.data() + part * weight_size;
      for (std::int64_t i = 0; i < weight_size; ++i) dw[i] += partial[i];
    }
  }
  if (has_bias_) {
    float* db = bias_grad_.data();
    for (std::int64_t f = 0; f < filters; ++f) {
      double sum = 0.0;
      for (int part = 0; part < parts; ++part)
        sum += db_parts_[static_cast<std::size_t>(part * filters + f)];
      db[f] += static_cast<float>(sum);
    }
  }
  return need_input_grad ? dx_ : none_;
}

std::unique_ptr<Layer> Conv2d::clone() const {
  return std::make_unique<Conv2d>(name(), in_channels_, out_channels_, kernel_, stride_, padding_,
                                  has_bias_, init_kind_, sigma_);
}

}  // namespace dtrain::nn
