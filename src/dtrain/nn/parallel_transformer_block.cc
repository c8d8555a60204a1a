#include "dtrain/nn/parallel_transformer_block.h"

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kElementGrain = 16384;

// out[i] = a[i] + b[i] over n elements, split over the compute pool (as TransformerBlock).
void add(std::int64_t n, const float* a, const float* b, float* out) {
  compute_pool().parallel_for(n, kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

}  // namespace

ParallelTransformerBlock::ParallelTransformerBlock(std::string name, std::int64_t dim,
                                                   std::int64_t heads, std::int64_t block,
                                                   GroupComm& group)
    : Layer(std::move(name)), dim_(dim), heads_(heads), block_(block), parts_(group.size()) {
  const std::string& base = this->name();
  ln1_ = std::make_unique<LayerNorm>(base + ".ln1", dim);
  attn_ = std::make_unique<ParallelCausalSelfAttention>(base + ".attn", dim, heads, block, group);
  ln2_ = std::make_unique<LayerNorm>(base + ".ln2", dim);
  fc_ = std::make_unique<ColumnParallelLinear>(base + ".fc", dim, 4 * dim, group);
  gelu_ = std::make_unique<Activation>(base + ".gelu", ActivationKind::kGelu);
  out_ = std::make_unique<RowParallelLinear>(base + ".out", 4 * dim, dim, group);
}

std::string ParallelTransformerBlock::describe() const {
  return fmt::format("ParallelTransformerBlock({}, {} heads, block {}, split over {} ranks)", dim_,
                     heads_, block_, parts_);
}

tensor::Shape ParallelTransformerBlock::output_shape(const tensor::Shape& input) const {
  const tensor::Shape h = attn_->output_shape(ln1_->output_shape(input));
  return out_->output_shape(gelu_->output_shape(fc_->output_shape(ln2_->output_shape(h))));
}

void ParallelTransformerBlock::declare(ParamStore& store) {
  for (Layer* layer : sublayers()) layer->declare(store);
}

void ParallelTransformerBlock::bind(ParamStore& store) {
  for (Layer* layer : sublayers()) layer->bind(store);
}

const tensor::Tensor& ParallelTransformerBlock::forward(const tensor::Tensor& x,
                                                        const ForwardContext& ctx) {
  output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const tensor::Tensor& a = attn_->forward(ln1_->forward(x, ctx), ctx);
  h_.ensure_shape(x.shape());
  add(x.numel(), x.data(), a.data(), h_.data());
  const tensor::Tensor& m =
      out_->forward(gelu_->forward(fc_->forward(ln2_->forward(h_, ctx), ctx), ctx), ctx);
  y_.ensure_shape(x.shape());
  add(x.numel(), h_.data(), m.data(), y_.data());
  return y_;
}

const tensor::Tensor& ParallelTransformerBlock::backward(const tensor::Tensor& dy,
                                                         bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const tensor::Tensor& dm =
      ln2_->backward(fc_->backward(gelu_->backward(out_->backward(dy, true), true), true), true);
  dh_.ensure_shape(y_.shape());
  add(dy.numel(), dy.data(), dm.data(), dh_.data());
  const tensor::Tensor& da = ln1_->backward(attn_->backward(dh_, true), need_input_grad);
  if (!need_input_grad) return none_;
  dx_.ensure_shape(y_.shape());
  add(dh_.numel(), dh_.data(), da.data(), dx_.data());
  return dx_;
}

std::vector<Layer*> ParallelTransformerBlock::sublayers() {
  return {ln1_.get(), attn_.get(), ln2_.get(), fc_.get(), gelu_.get(), out_.get()};
}

}  // namespace dtrain::nn
