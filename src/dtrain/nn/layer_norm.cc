#include "dtrain/nn/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/fast_math.h"

namespace dtrain::nn {
namespace {

// Rows per slice of the compute pool: 64 rows of d = 128 are 32 KB of x, enough to pay a hand-off.
// Backward also sums the parameter gradients per chunk of this many rows (a fixed split, whatever
// the thread count).
constexpr std::int64_t kRowGrain = 64;

}  // namespace

LayerNorm::LayerNorm(std::string name, std::int64_t dim, float eps)
    : Layer(std::move(name)), dim_(dim), eps_(eps) {
  if (dim_ <= 0) {
    throw ConfigError(
        fmt::format("layer {}: LayerNorm({}) needs a positive width", this->name(), dim_));
  }
  if (!(eps_ > 0.0f) || !std::isfinite(eps_)) {
    throw ConfigError(
        fmt::format("layer {}: LayerNorm eps must be finite and > 0, got {}", this->name(), eps_));
  }
}

std::string LayerNorm::describe() const { return fmt::format("LayerNorm({})", dim_); }

tensor::Shape LayerNorm::output_shape(const tensor::Shape& input) const {
  if (input.size() < 2 || input.back() != dim_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, ..., {}] (normalized over the last dimension), got {}; "
        "check the previous layer's output",
        name(), describe(), dim_, tensor::batch_shape_str(input)));
  }
  return input;
}

void LayerNorm::declare(ParamStore& store) {
  weight_index_ = store.add_param(name() + ".weight", {dim_}, /*weight_decay=*/false);
  bias_index_ = store.add_param(name() + ".bias", {dim_}, /*weight_decay=*/false);
}

void LayerNorm::bind(ParamStore& store) {
  weight_ = store.param(weight_index_);
  bias_ = store.param(bias_index_);
  weight_grad_ = store.grad(weight_index_);
  bias_grad_ = store.grad(bias_index_);
}

void LayerNorm::init(Rng& /*rng*/) {
  weight_.fill(1.0f);
  bias_.zero();
}

const tensor::Tensor& LayerNorm::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  x_ = x;
  const std::int64_t rows = x.numel() / dim_;
  const std::int64_t d = dim_;
  y_.ensure_shape(x.shape());
  mean_.ensure_shape({rows});
  rstd_.ensure_shape({rows});
  const float* xd = x.data();
  const float* w = weight_.data();
  const float* b = bias_.data();
  float* y = y_.data();
  float* mean = mean_.data();
  float* rstd = rstd_.data();
  const float inv_d = 1.0f / static_cast<float>(d);
  const float eps = eps_;
  compute_pool().parallel_for(rows, kRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const float* x_row = xd + r * d;
      const float mu = lane_sum(d, [&](std::int64_t c) { return x_row[c]; }) * inv_d;
      const float sq =
          lane_sum(d, [&](std::int64_t c) { return (x_row[c] - mu) * (x_row[c] - mu); });
      const float rs = 1.0f / std::sqrt(sq * inv_d + eps);
      mean[r] = mu;
      rstd[r] = rs;
      float* y_row = y + r * d;
      for (std::int64_t c = 0; c < d; ++c) y_row[c] = (x_row[c] - mu) * rs * w[c] + b[c];
    }
  });
  return y_;
}

const tensor::Tensor& LayerNorm::backward(const tensor::Tensor& dy, bool need_input_grad) {
  return backward_rows(dy, need_input_grad, nullptr);
}

const tensor::Tensor& LayerNorm::backward_plus(const tensor::Tensor& dy,
                                               const tensor::Tensor& residual) {
  DTRAIN_CHECK(residual.shape() == x_.shape() && residual.is_contiguous(),
               "layer {}: residual gradient shape {} differs from input shape {}", name(),
               tensor::shape_str(residual.shape()), tensor::shape_str(x_.shape()));
  return backward_rows(dy, true, residual.data());
}

const tensor::Tensor& LayerNorm::backward_rows(const tensor::Tensor& dy, bool need_input_grad,
                                               const float* residual) {
  DTRAIN_CHECK(dy.shape() == x_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from input shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(x_.shape()));
  const std::int64_t rows = x_.numel() / dim_;
  const std::int64_t d = dim_;
  const std::int64_t chunks = (rows + kRowGrain - 1) / kRowGrain;
  const float* xd = x_.data();
  const float* g = dy.data();
  const float* mean = mean_.data();
  const float* rstd = rstd_.data();
  const float* w = weight_.data();
  if (need_input_grad) dx_.ensure_shape(x_.shape());
  float* dx = need_input_grad ? dx_.data() : nullptr;
  // Per chunk of kRowGrain rows: its sums of dy xhat and dy (2 d floats), rows in order.
  partial_.ensure_shape({chunks, 2, d});
  float* partial = partial_.data();
  const float inv_d = 1.0f / static_cast<float>(d);
  compute_pool().parallel_for(chunks, 1, [&](std::int64_t first, std::int64_t end) {
    for (std::int64_t chunk = first; chunk < end; ++chunk) {
      float* __restrict dw_part = partial + chunk * 2 * d;
      float* __restrict db_part = dw_part + d;
      std::fill(dw_part, dw_part + 2 * d, 0.0f);
      const std::int64_t row_end = std::min(rows, (chunk + 1) * kRowGrain);
      for (std::int64_t r = chunk * kRowGrain; r < row_end; ++r) {
        const float* __restrict x_row = xd + r * d;
        const float* __restrict g_row = g + r * d;
        const float mu = mean[r];
        const float rs = rstd[r];
        for (std::int64_t c = 0; c < d; ++c) {
          dw_part[c] += g_row[c] * ((x_row[c] - mu) * rs);
          db_part[c] += g_row[c];
        }
        if (dx == nullptr) continue;
        // mean(g) and mean(g xhat), g = dy weight.
        const float mean_g = lane_sum(d, [&](std::int64_t c) { return g_row[c] * w[c]; }) * inv_d;
        const float mean_gx =
            lane_sum(d, [&](std::int64_t c) { return g_row[c] * w[c] * ((x_row[c] - mu) * rs); }) *
            inv_d;
        float* __restrict dx_row = dx + r * d;
        if (residual == nullptr) {
          for (std::int64_t c = 0; c < d; ++c) {
            const float xhat = (x_row[c] - mu) * rs;
            dx_row[c] = rs * (g_row[c] * w[c] - mean_g - xhat * mean_gx);
          }
        } else {
          const float* __restrict res_row = residual + r * d;
          for (std::int64_t c = 0; c < d; ++c) {
            const float xhat = (x_row[c] - mu) * rs;
            dx_row[c] = res_row[c] + rs * (g_row[c] * w[c] - mean_g - xhat * mean_gx);
          }
        }
      }
    }
  });
  // dweight += sum dy xhat, dbias += sum dy: the chunks' sums in chunk order, so the result does
  // not depend on the thread count.
  float* dw = weight_grad_.data();
  float* db = bias_grad_.data();
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const float* dw_part = partial + chunk * 2 * d;
    for (std::int64_t c = 0; c < d; ++c) {
      dw[c] += dw_part[c];
      db[c] += dw_part[d + c];
    }
  }
  return need_input_grad ? dx_ : none_;
}

std::unique_ptr<Layer> LayerNorm::clone() const {
  return std::make_unique<LayerNorm>(name(), dim_, eps_);
}

}  // namespace dtrain::nn
