#include "dtrain/nn/linear.h"

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/tensor/gemm.h"
#include "dtrain/tensor/transpose.h"

namespace dtrain::nn {
namespace {

// Rows per slice of forward_onto's residual pass: 64 rows of 128 outputs are 32 KB.
constexpr std::int64_t kResidualRowGrain = 64;

}  // namespace

Linear::Linear(std::string name, std::int64_t in_features, std::int64_t out_features, InitKind init,
               float sigma)
    : Layer(std::move(name)),
      in_(in_features),
      out_(out_features),
      init_kind_(init),
      sigma_(sigma) {
  if (in_ <= 0 || out_ <= 0) {
    throw ConfigError(fmt::format("layer {}: Linear({} -> {}) needs positive feature counts",
                                  this->name(), in_, out_));
  }
}

std::string Linear::describe() const { return fmt::format("Linear({} -> {})", in_, out_); }

tensor::Shape Linear::output_shape(const tensor::Shape& input) const {
  if (input.size() < 2 || input.back() != in_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, {}], got {}; leading dimensions are allowed ([B, T, {}]) "
        "but the last must be {}: check the previous layer's output or the model input shape",
        name(), describe(), in_, tensor::batch_shape_str(input), in_, in_));
  }
  tensor::Shape output = input;
  output.back() = out_;
  return output;
}

void Linear::declare(ParamStore& store) {
  weight_index_ = store.add_param(name() + ".weight", {out_, in_}, /*weight_decay=*/true);
  bias_index_ = store.add_param(name() + ".bias", {out_}, /*weight_decay=*/false);
}

void Linear::bind(ParamStore& store) {
  weight_ = store.param(weight_index_);
  bias_ = store.param(bias_index_);
  weight_grad_ = store.grad(weight_index_);
  bias_grad_ = store.grad(bias_index_);
}

void Linear::init(Rng& rng) {
  init_weights(weight_, in_, out_, init_kind_, sigma_, rng);
  init_bias(bias_, in_, init_kind_, rng);
}

const tensor::Tensor& Linear::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const std::int64_t batch = x.numel() / in_;  // rows: every leading dimension
  x_ = x;
  y_.ensure_shape(out_shape);
  float* y = y_.data();
  const float* b = bias_.data();
  if (out_ > batch) {
    // y^T (out, B) = W x^T, each row starting at its bias, then transposed into y: see the header.
    yt_.ensure_shape({out_, batch});
    float* yt = yt_.data();
    for (std::int64_t o = 0; o < out_; ++o) std::fill(yt + o * batch, yt + (o + 1) * batch, b[o]);
    tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, out_, batch, in_, 1.0f, weight_.data(),
                 in_, x.data(), in_, 1.0f, yt, batch);
    tensor::transpose(out_, batch, yt, batch, y, out_);
    return y_;
  }
  // Start every row at the bias, then accumulate x W^T onto it (beta = 1).
  for (std::int64_t row = 0; row < batch; ++row) {
    std::copy(b, b + out_, y + row * out_);
  }
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, batch, out_, in_, 1.0f, x.data(), in_,
               weight_.data(), in_, 1.0f, y, out_);
  return y_;
}

const tensor::Tensor& Linear::forward_onto(const tensor::Tensor& x, const tensor::Tensor& residual,
                                           const ForwardContext& ctx) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(residual.shape() == out_shape && residual.is_contiguous(),
               "layer {}: residual shape {} differs from output shape {}", name(),
               tensor::shape_str(residual.shape()), tensor::shape_str(out_shape));
  const std::int64_t batch = x.numel() / in_;
  if (out_ > batch) {
    // The transposed path writes y whole: add the residual after it.
    forward(x, ctx);
    float* y = y_.data();
    const float* r = residual.data();
    for (std::int64_t i = 0; i < y_.numel(); ++i) y[i] += r[i];
    return y_;
  }
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  x_ = x;
  y_.ensure_shape(out_shape);
  float* y = y_.data();
  const float* r = residual.data();
  const float* b = bias_.data();
  // A memory-bound pass (the residual in, y out), split over the pool by rows.
  compute_pool().parallel_for(batch, kResidualRowGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t row = begin; row < end; ++row) {
      float* __restrict y_row = y + row * out_;
      const float* __restrict r_row = r + row * out_;
      for (std::int64_t o = 0; o < out_; ++o) y_row[o] = r_row[o] + b[o];
    }
  });
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kYes, batch, out_, in_, 1.0f, x.data(), in_,
               weight_.data(), in_, 1.0f, y, out_);
  return y_;
}

const tensor::Tensor& Linear::backward(const tensor::Tensor& dy, bool need_input_grad) {
  const std::int64_t batch = x_.numel() / in_;  // rows: every leading dimension
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  // dW (out, in) += dy^T x: a K = B reduction, so a batch of 1 is an outer product.
  tensor::gemm(tensor::Trans::kYes, tensor::Trans::kNo, out_, in_, batch, 1.0f, dy.data(), out_,
               x_.data(), in_, 1.0f, weight_grad_.data(), in_);
  // db += column sums of dy, rows in order so the result does not depend on threads.
  float* db = bias_grad_.data();
  const float* g = dy.data();
  for (std::int64_t row = 0; row < batch; ++row) {
    const float* g_row = g + row * out_;
    for (std::int64_t o = 0; o < out_; ++o) db[o] += g_row[o];
  }
  if (!need_input_grad) return none_;
  dx_.ensure_shape(x_.shape());
  tensor::gemm(tensor::Trans::kNo, tensor::Trans::kNo, batch, in_, out_, 1.0f, dy.data(), out_,
               weight_.data(), in_, 0.0f, dx_.data(), in_);
  return dx_;
}

std::unique_ptr<Layer> Linear::clone() const {
  return std::make_unique<Linear>(name(), in_, out_, init_kind_, sigma_);
}

}  // namespace dtrain::nn
