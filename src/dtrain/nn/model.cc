#include "dtrain/nn/model.h"

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

const tensor::Tensor& Model::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  if (!built_) throw InternalError("Model::forward before build()");
  const tensor::Tensor* h = &x;
  for (auto& layer : layers_) h = &layer->forward(*h, ctx);
  return *h;
}

void Model::backward(const tensor::Tensor& dy,
                     const std::function<void(std::size_t layer)>& after_layer) {
  // Layers up to the first one with parameters need no input gradient: nothing below them learns.
  // For an MLP that skips fc1's dx = dy W product, a third of fc1's backward FLOPs.
  const tensor::Tensor* g = &dy;
  for (std::size_t i = layers_.size(); i-- > first_trainable_;) {
    g = &layers_[i]->backward(*g, /*need_input_grad=*/i > first_trainable_);
    if (after_layer) after_layer(i);
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
