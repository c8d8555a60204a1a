#include "dtrain/nn/model.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {

void Model::add(std::unique_ptr<Layer> layer) {
  if (built_) throw InternalError("Model::add after build()");
  layers_.push_back(std::move(layer));
}

tensor::Shape Model::output_shape(std::int64_t batch) const {
  tensor::Shape shape{batch};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  for (const auto& layer : layers_) shape = layer->output_shape(shape);
  return shape;
}

void Model::build() {
  if (built_) return;
  if (layers_.empty()) throw ConfigError("a model needs at least one layer");
  output_shape(1);  // throws ShapeError at the first layer that does not fit
  first_trainable_ = layers_.size();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const std::size_t before = store_.param_entries().size();
    layers_[i]->declare(store_);
    param_layer_.resize(store_.param_entries().size(), i);
    if (store_.param_entries().size() > before && first_trainable_ == layers_.size()) {
      first_trainable_ = i;
    }
  }
  store_.finalize();
  for (auto& layer : layers_) layer->bind(store_);
  built_ = true;
}

void Model::init(std::uint64_t seed) {
  if (!built_) throw InternalError("Model::init before build()");
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    Rng rng(seed, rng_stream(/*purpose=*/0x1A17, i));
    layers_[i]->init(rng);
  }
}

const tensor::Tensor& Model::forward(const tensor::Tensor& x, const ForwardContext& ctx,
                                     const LayerHook& before_layer) {
  return forward_range(x, ctx, LayerRange{0, layers_.size()}, before_layer);
}

void Model::backward(const tensor::Tensor& dy, const LayerHook& after_layer) {
  backward_range(dy, LayerRange{0, layers_.size()}, 0, /*input_grad=*/false, after_layer);
}

const tensor::Tensor& Model::forward_range(const tensor::Tensor& x, const ForwardContext& ctx,
                                           LayerRange range, const LayerHook& before_layer) {
  if (!built_) throw InternalError("Model::forward before build()");
  DTRAIN_CHECK(range.begin < range.end && range.end <= layers_.size(),
               "layer range [{}, {}) of a {}-layer model", range.begin, range.end, layers_.size());
  DTRAIN_CHECK(ctx.slot < slots(), "forward in slot {} of {} (Model::reserve_slots)", ctx.slot,
               slots());
  auto& layers = ctx.slot == 0 ? layers_ : replicas_[ctx.slot - 1];
  const tensor::Tensor* h = &x;
  for (std::size_t i = range.begin; i < range.end; ++i) {
    if (before_layer) before_layer(i);
    h = &layers[i]->forward(*h, ctx);
  }
  return *h;
}

const tensor::Tensor& Model::backward_range(const tensor::Tensor& dy, LayerRange range,
                                            std::size_t slot, bool input_grad,
                                            const LayerHook& after_layer) {
  DTRAIN_CHECK(range.begin < range.end && range.end <= layers_.size(),
               "layer range [{}, {}) of a {}-layer model", range.begin, range.end, layers_.size());
  DTRAIN_CHECK(slot < slots(), "backward in slot {} of {} (Model::reserve_slots)", slot, slots());
  auto& layers = slot == 0 ? layers_ : replicas_[slot - 1];
  // Layers up to the first one with parameters need no input gradient: nothing below them learns.
  // For an MLP that skips fc1's dx = dy W product, a third of fc1's backward FLOPs. A stage that
  // sends its input gradient on (input_grad) runs all of its layers instead.
  const std::size_t lowest = input_grad ? range.begin : std::max(range.begin, first_trainable_);
  const tensor::Tensor* g = &dy;
  for (std::size_t i = range.end; i-- > lowest;) {
    g = &layers[i]->backward(*g, /*need_input_grad=*/i > lowest || input_grad);
    if (after_layer) after_layer(i);
  }
  return input_grad ? *g : none_;
}

void Model::reserve_slots(std::size_t slots) {
  if (!built_) throw InternalError("Model::reserve_slots before build()");
  while (replicas_.size() + 1 < slots) {
    std::vector<std::unique_ptr<Layer>> replica;
    // Declared into a scratch store in the original order, each replica gets the tensor indices
    // its original got, and then binds to the model's store: the same parameters and gradients.
    ParamStore scratch;
    for (const auto& layer : layers_) {
      replica.push_back(layer->clone());
      replica.back()->declare(scratch);
    }
    DTRAIN_CHECK_EQ(scratch.param_entries().size(), store_.param_entries().size());
    for (auto& layer : replica) layer->bind(store_);
    replicas_.push_back(std::move(replica));
  }
}

std::string Model::summary() const {
  std::string text;
  tensor::Shape shape{1};
  shape.insert(shape.end(), sample_shape_.begin(), sample_shape_.end());
  for (const auto& layer : layers_) {
    shape = layer->output_shape(shape);
    std::int64_t count = 0;
    for (const auto& entry : store_.param_entries()) {
      if (entry.name.rfind(layer->name() + ".", 0) == 0) count += entry.numel;
    }
    text += fmt::format("  {:<12} {:<40} -> {:<18} {:>9} params\n", layer->name(),
                        layer->describe(), tensor::shape_str(shape), count);
  }
  text += fmt::format("  total {} parameters ({:.2f} MB)\n", store_.num_params(),
                      static_cast<double>(store_.num_params()) * 4.0 / 1e6);
  return text;
}

}  // namespace dtrain::nn
