#include "dtrain/nn/transformer_block.h"

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kElementGrain = 16384;

// out[i] = a[i] + b[i] over n elements, split over the compute pool.
void add(std::int64_t n, const float* a, const float* b, float* out) {
  compute_pool().parallel_for(n, kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) out[i] = a[i] + b[i];
  });
}

}  // namespace

TransformerBlock::TransformerBlock(std::string name, std::int64_t dim, std::int64_t heads,
                                   std::int64_t block, float sigma)
    : Layer(std::move(name)), dim_(dim), heads_(heads), block_(block) {
  const std::string& base = this->name();
  ln1_ = std::make_unique<LayerNorm>(base + ".ln1", dim);
  auto attention = std::make_unique<CausalSelfAttention>(base + ".attn", dim, heads, block, sigma);
  whole_attention_ = attention.get();
  attn_ = std::move(attention);
  ln2_ = std::make_unique<LayerNorm>(base + ".ln2", dim);
  fc_ = std::make_unique<Linear>(base + ".fc", dim, 4 * dim, InitKind::kNormal, sigma);
  gelu_ = std::make_unique<Activation>(base + ".gelu", ActivationKind::kGelu);
  auto out = std::make_unique<Linear>(base + ".out", 4 * dim, dim, InitKind::kNormal, sigma);
  whole_out_ = out.get();
  out_ = std::move(out);
}

TransformerBlock::TransformerBlock(std::string name, std::int64_t dim, std::int64_t heads,
                                   std::int64_t block, std::unique_ptr<Layer> attn,
                                   std::unique_ptr<Layer> fc, std::unique_ptr<Layer> out, int split)
    : Layer(std::move(name)),
      dim_(dim),
      heads_(heads),
      block_(block),
      split_(split),
      attn_(std::move(attn)),
      fc_(std::move(fc)),
      out_(std::move(out)) {
  const std::string& base = this->name();
  ln1_ = std::make_unique<LayerNorm>(base + ".ln1", dim);
  ln2_ = std::make_unique<LayerNorm>(base + ".ln2", dim);
  gelu_ = std::make_unique<Activation>(base + ".gelu", ActivationKind::kGelu);
}

std::string TransformerBlock::describe() const {
  if (split_ > 1) {
    return fmt::format("TransformerBlock({}, {} heads, block {}, split over {} ranks)", dim_,
                       heads_, block_, split_);
  }
  return fmt::format("TransformerBlock({}, {} heads, block {})", dim_, heads_, block_);
}

tensor::Shape TransformerBlock::output_shape(const tensor::Shape& input) const {
  // The sub-layers' checks name the sub-layer ("block1.attn") and both shapes.
  const tensor::Shape h = attn_->output_shape(ln1_->output_shape(input));
  return out_->output_shape(gelu_->output_shape(fc_->output_shape(ln2_->output_shape(h))));
}

void TransformerBlock::declare(ParamStore& store) {
  for (Layer* layer : sublayers()) layer->declare(store);
}

void TransformerBlock::bind(ParamStore& store) {
  for (Layer* layer : sublayers()) layer->bind(store);
}

void TransformerBlock::init(Rng& rng) {
  for (Layer* layer : sublayers()) layer->init(rng);
}

const tensor::Tensor& TransformerBlock::forward(const tensor::Tensor& x,
                                                const ForwardContext& ctx) {
  output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  out_shape_ = x.shape();
  // Unsplit, the residual sums ride on proj's and out's products (Linear::forward_onto); split,
  // those are other layers, and the sums are passes of their own.
  const tensor::Tensor* h = &h_;
  if (whole_attention_ != nullptr) {
    h = &whole_attention_->forward_onto(ln1_->forward(x, ctx), x, ctx);
  } else {
    const tensor::Tensor& a = attn_->forward(ln1_->forward(x, ctx), ctx);
    h_.ensure_shape(x.shape());
    add(x.numel(), x.data(), a.data(), h_.data());
  }
  const tensor::Tensor& hidden = gelu_->forward(fc_->forward(ln2_->forward(*h, ctx), ctx), ctx);
  if (whole_out_ != nullptr) return whole_out_->forward_onto(hidden, *h, ctx);
  const tensor::Tensor& m = out_->forward(hidden, ctx);
  y_.ensure_shape(x.shape());
  add(x.numel(), h->data(), m.data(), y_.data());
  return y_;
}

const tensor::Tensor& TransformerBlock::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == out_shape_ && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(out_shape_));
  // MLP branch, last layer first; its input gradient adds to the identity's, inside ln2's backward
  // pass (dh = dy + ln2's dx).
  const tensor::Tensor& dh =
      ln2_->backward_plus(fc_->backward(gelu_->backward(out_->backward(dy, true), true), true), dy);
  // Attention branch. Its parameters need gradients even when x does not.
  const tensor::Tensor& da = attn_->backward(dh, true);
  if (!need_input_grad) {
    ln1_->backward(da, false);
    return none_;
  }
  return ln1_->backward_plus(da, dh);  // dx = dh + ln1's dx
}

std::vector<Layer*> TransformerBlock::sublayers() {
  return {ln1_.get(), attn_.get(), ln2_.get(), fc_.get(), gelu_.get(), out_.get()};
}

std::unique_ptr<Layer> TransformerBlock::clone() const {
  if (whole_attention_ == nullptr) {
    return std::make_unique<TransformerBlock>(name(), dim_, heads_, block_, attn_->clone(),
                                              fc_->clone(), out_->clone(), split_);
  }
  // sigma does not matter: a replica shares the parameters and is never init()ed.
  auto copy = std::make_unique<TransformerBlock>(name(), dim_, heads_, block_);
  copy->whole_attention_->set_tile(whole_attention_->tile());
  return copy;
}

}  // namespace dtrain::nn
