#include "dtrain/nn/parallel_causal_self_attention.h"

#include "dtrain/base/error.h"

namespace dtrain::nn {

ParallelCausalSelfAttention::ParallelCausalSelfAttention(std::string name, std::int64_t dim,
                                                         std::int64_t heads, std::int64_t block,
                                                         GroupComm& group)
    : Layer(std::move(name)), group_(group), dim_(dim), heads_(heads), block_(block) {
  const int parts = group.size();
  if (dim_ <= 0 || heads_ <= 0 || block_ <= 0 || dim_ % heads_ != 0 || heads_ % parts != 0) {
    throw ConfigError(fmt::format(
        "layer {}: {} attention heads (width {}) cannot be split over {} tensor-parallel ranks: "
        "each rank takes whole heads, so the head count must be divisible by the rank count",
        this->name(), heads_, dim_, parts));
  }
  local_heads_ = heads_ / parts;
  qkv_ = std::make_unique<ColumnParallelLinear>(this->name() + ".qkv", dim_, 3 * dim_, group);
  proj_ = std::make_unique<RowParallelLinear>(this->name() + ".proj", dim_, dim_, group);
}

std::string ParallelCausalSelfAttention::describe() const {
  return fmt::format("ParallelCausalSelfAttention({}, {} of {} heads, block {})", dim_,
                     local_heads_, heads_, block_);
}

tensor::Shape ParallelCausalSelfAttention::output_shape(const tensor::Shape& input) const {
  if (input.size() != 3 || input[1] < 1 || input[1] > block_ || input[2] != dim_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, T, {}] with 1 <= T <= {}, got {}; check the previous "
        "layer's output",
        name(), describe(), dim_, block_, tensor::batch_shape_str(input)));
  }
  return input;
}

void ParallelCausalSelfAttention::declare(ParamStore& store) {
  qkv_->declare(store);
  proj_->declare(store);
}

void ParallelCausalSelfAttention::bind(ParamStore& store) {
  qkv_->bind(store);
  proj_->bind(store);
}

const tensor::Tensor& ParallelCausalSelfAttention::forward(const tensor::Tensor& x,
                                                           const ForwardContext& ctx) {
  output_shape(x.shape());
  const std::int64_t local_dim = dim_ / heads_ * local_heads_;
  dims_ = AttentionDims{x.dim(0), x.dim(1), local_heads_, local_dim};
  qkv_out_ = qkv_->forward(x, ctx);
  probs_.ensure_shape({dims_.batch, local_heads_, dims_.length, dims_.length});
  heads_out_.ensure_shape({x.dim(0), x.dim(1), local_dim});
  causal_attention_forward(dims_, tile_, qkv_out_.data(), probs_.data(), heads_out_.data());
  return proj_->forward(heads_out_, ctx);
}

const tensor::Tensor& ParallelCausalSelfAttention::backward(const tensor::Tensor& dy,
                                                            bool need_input_grad) {
  const tensor::Tensor& dheads = proj_->backward(dy, /*need_input_grad=*/true);
  dqkv_.ensure_shape(qkv_out_.shape());
  causal_attention_backward(dims_, tile_, qkv_out_.data(), probs_.data(), dheads.data(), scratch_,
                            dqkv_.data());
  return qkv_->backward(dqkv_, need_input_grad);
}

std::unique_ptr<Layer> ParallelCausalSelfAttention::clone() const {
  auto copy = std::make_unique<ParallelCausalSelfAttention>(name(), dim_, heads_, block_, group_);
  copy->tile_ = tile_;
  return copy;
}

}  // namespace dtrain::nn
