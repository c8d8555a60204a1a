#include "dtrain/nn/embedding.h"

#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/nn/init.h"

namespace dtrain::nn {

Embedding::Embedding(std::string name, std::int64_t vocab, std::int64_t block, std::int64_t dim,
                     float sigma)
    : Layer(std::move(name)), vocab_(vocab), block_(block), dim_(dim), sigma_(sigma) {
  if (vocab_ <= 0 || block_ <= 0 || dim_ <= 0) {
    throw ConfigError(fmt::format(
        "layer {}: Embedding needs a positive vocabulary, block and width, got {}, {} and {}",
        this->name(), vocab_, block_, dim_));
  }
}

std::string Embedding::describe() const {
  return fmt::format("Embedding({} tokens + {} positions -> {})", vocab_, block_, dim_);
}

tensor::Shape Embedding::output_shape(const tensor::Shape& input) const {
  if (input.size() != 2 || input[1] < 1 || input[1] > block_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, T] of token ids with 1 <= T <= {}, got {}; the model "
        "reads windows of at most block = {} tokens",
        name(), describe(), block_, tensor::batch_shape_str(input), block_));
  }
  return {input[0], input[1], dim_};
}

void Embedding::declare(ParamStore& store) {
  token_index_ = store.add_param(token_weight_name(), {vocab_, dim_}, /*weight_decay=*/true);
  position_index_ = store.add_param(name() + ".position_weight", {block_, dim_},
                                    /*weight_decay=*/true);
}

void Embedding::bind(ParamStore& store) {
  token_weight_ = store.param(token_index_);
  position_weight_ = store.param(position_index_);
  token_grad_ = store.grad(token_index_);
  position_grad_ = store.grad(position_index_);
}

void Embedding::init(Rng& rng) {
  // N(0, sigma^2) for both tables; init_weights' fans are unused by kNormal.
  init_weights(token_weight_, dim_, dim_, InitKind::kNormal, sigma_, rng);
  init_weights(position_weight_, dim_, dim_, InitKind::kNormal, sigma_, rng);
}

const tensor::Tensor& Embedding::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  const tensor::Shape out_shape = output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  batch_ = out_shape[0];
  length_ = out_shape[1];
  const std::int64_t n = batch_ * length_;
  ids_.resize(static_cast<std::size_t>(n));
  const float* xd = x.data();
  for (std::int64_t i = 0; i < n; ++i) {
    const float v = xd[i];
    // The negated range test also rejects NaN; it comes before the cast, which it keeps defined.
    if (!(v >= 0.0f && v < static_cast<float>(vocab_)) || v != std::floor(v)) {
      throw DataError(fmt::format(
          "layer {}: token id {} at sample {}, position {} is not an integer in [0, {}); check "
          "that the data's vocabulary matches model.vocab",
          name(), v, i / length_, i % length_, vocab_));
    }
    ids_[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(v);
  }
  y_.ensure_shape(out_shape);
  const float* tok = token_weight_.data();
  const float* pos = position_weight_.data();
  float* y = y_.data();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* t_row = tok + ids_[static_cast<std::size_t>(i)] * dim_;
    const float* p_row = pos + (i % length_) * dim_;
    float* y_row = y + i * dim_;
    for (std::int64_t c = 0; c < dim_; ++c) y_row[c] = t_row[c] + p_row[c];
  }
  return y_;
}

const tensor::Tensor& Embedding::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t n = batch_ * length_;
  const float* g = dy.data();
  float* dtok = token_grad_.data();
  float* dpos = position_grad_.data();
  for (std::int64_t i = 0; i < n; ++i) {
    const float* g_row = g + i * dim_;
    float* t_row = dtok + ids_[static_cast<std::size_t>(i)] * dim_;
    float* p_row = dpos + (i % length_) * dim_;
    for (std::int64_t c = 0; c < dim_; ++c) {
      t_row[c] += g_row[c];
      p_row[c] += g_row[c];
    }
  }
  if (!need_input_grad) return none_;
  dx_.ensure_shape({batch_, length_});
  dx_.zero();
  return dx_;
}

std::unique_ptr<Layer> Embedding::clone() const {
  return std::make_unique<Embedding>(name(), vocab_, block_, dim_, sigma_);
}

}  // namespace dtrain::nn
