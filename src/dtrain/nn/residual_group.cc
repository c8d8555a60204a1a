#include "dtrain/nn/residual_group.h"

#include <fmt/format.h>

#include <typeinfo>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/tensor/elementwise.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kElementGrain = 16384;

// out = a + b over [0, n) (tensor/elementwise.h), split over the compute pool.
void add_in_parallel(const float* a, const float* b, float* out, std::int64_t n) {
  compute_pool().parallel_for(n, kElementGrain, [&](std::int64_t begin, std::int64_t end) {
    tensor::add(a + begin, b + begin, out + begin, end - begin);
  });
}

tensor::Shape chain_shape(const std::vector<std::unique_ptr<Layer>>& layers, tensor::Shape shape) {
  for (const auto& layer : layers) shape = layer->output_shape(shape);
  return shape;
}

std::vector<std::unique_ptr<Layer>> clone_all(const std::vector<std::unique_ptr<Layer>>& layers) {
  std::vector<std::unique_ptr<Layer>> out;
  for (const auto& layer : layers) out.push_back(layer->clone());
  return out;
}

}  // namespace

ResidualGroup::ResidualGroup(std::string name, std::vector<std::unique_ptr<Layer>> body,
                             std::vector<std::unique_ptr<Layer>> shortcut,
                             std::unique_ptr<Activation> act)
    : Layer(std::move(name)),
      body_(std::move(body)),
      shortcut_(std::move(shortcut)),
      act_(std::move(act)) {
  if (body_.empty()) {
    throw ConfigError(
        fmt::format("residual group {}: the body needs at least one layer", this->name()));
  }
}

std::string ResidualGroup::describe() const {
  return fmt::format(
      "Residual({} layers, {} shortcut{}{})", body_.size(),
      shortcut_.empty() ? std::string("identity") : fmt::format("{}-layer", shortcut_.size()),
      act_ ? ", then " : "", act_ ? std::string(activation_name(act_->kind())) : "");
}

std::unique_ptr<Layer> ResidualGroup::clone() const {
  // Each child's clone keeps what makes it itself in every slot (a synchronized batch norm's
  // reducer, an attention's tile).
  std::unique_ptr<Activation> act;
  if (act_) act = std::make_unique<Activation>(act_->name(), act_->kind(), act_->alpha());
  return std::make_unique<ResidualGroup>(name(), clone_all(body_), clone_all(shortcut_),
                                         std::move(act));
}

tensor::Shape ResidualGroup::body_shape(const tensor::Shape& input) const {
  return chain_shape(body_, input);
}

tensor::Shape ResidualGroup::shortcut_shape(const tensor::Shape& input) const {
  return chain_shape(shortcut_, input);
}

tensor::Shape ResidualGroup::output_shape(const tensor::Shape& input) const {
  const tensor::Shape main = body_shape(input);
  const tensor::Shape shortcut = shortcut_shape(input);
  if (main != shortcut) {
    throw ShapeError(fmt::format(
        "layer {} ({}): the body gives {} but the shortcut gives {}; they are added, so they must "
        "match",
        name(), describe(), tensor::shape_str(main), tensor::shape_str(shortcut)));
  }
  return main;
}

void ResidualGroup::declare(ParamStore& store) {
  for (auto& layer : body_) layer->declare(store);
  for (auto& layer : shortcut_) layer->declare(store);
}

void ResidualGroup::bind(ParamStore& store) {
  for (auto& layer : body_) layer->bind(store);
  for (auto& layer : shortcut_) layer->bind(store);
}

void ResidualGroup::init(Rng& rng) {
  for (auto& layer : body_) layer->init(rng);
  for (auto& layer : shortcut_) layer->init(rng);
}

const tensor::Tensor& ResidualGroup::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  x_ = x;
  const tensor::Tensor* m = &x;
  for (auto& layer : body_) m = &layer->forward(*m, ctx);
  const tensor::Tensor* s = &x;
  for (auto& layer : shortcut_) s = &layer->forward(*s, ctx);
  DTRAIN_CHECK(m->shape() == s->shape(), "layer {}: branches {} and {}", name(),
               tensor::shape_str(m->shape()), tensor::shape_str(s->shape()));
  y_.ensure_shape(m->shape());
  const float* a = m->data();
  const float* b = s->data();
  float* y = y_.data();
  add_in_parallel(a, b, y, y_.numel());
  return act_ ? act_->forward(y_, ctx) : y_;
}

const tensor::Tensor& ResidualGroup::backward(const tensor::Tensor& dy, bool need_input_grad) {
  const tensor::Tensor& g = act_ ? act_->backward(dy, true) : dy;
  // Body, last layer first; its first layer needs dx only when the group's input does.
  const tensor::Tensor* d = &g;
  for (std::size_t i = body_.size(); i-- > 1;) d = &body_[i]->backward(*d, true);
  Layer& first = *body_.front();
  // The branches' dx are summed by a plain Conv2d where one runs last (Conv2d::backward_add, as
  // nn::ResidualBlock does: the same bits, no separate pass): the body's first layer with the
  // identity shortcut, the shortcut's first layer otherwise.
  const auto plain_conv = [](Layer& layer) { return typeid(layer) == typeid(Conv2d); };
  if (need_input_grad && shortcut_.empty() && plain_conv(first)) {
    return static_cast<Conv2d&>(first).backward_add(*d, g);
  }
  const tensor::Tensor* dx_body = &first.backward(*d, need_input_grad);
  // The shortcut gets g too; its parameters need gradients even when x does not.
  const tensor::Tensor* dx_shortcut = &g;
  for (std::size_t i = shortcut_.size(); i-- > 1;) {
    dx_shortcut = &shortcut_[i]->backward(*dx_shortcut, true);
  }
  if (!shortcut_.empty()) {
    Layer& entry = *shortcut_.front();
    if (need_input_grad && plain_conv(entry)) {
      return static_cast<Conv2d&>(entry).backward_add(*dx_shortcut, *dx_body);
    }
    dx_shortcut = &entry.backward(*dx_shortcut, need_input_grad);
  }
  if (!need_input_grad) return none_;
  dx_.ensure_shape(x_.shape());
  const float* a = dx_body->data();
  const float* b = dx_shortcut->data();
  float* dx = dx_.data();
  add_in_parallel(a, b, dx, dx_.numel());
  return dx_;
}

std::vector<Layer*> ResidualGroup::sublayers() {
  std::vector<Layer*> out;
  for (auto& layer : body_) out.push_back(layer.get());
  for (auto& layer : shortcut_) out.push_back(layer.get());
  if (act_) out.push_back(act_.get());
  return out;
}

std::vector<std::string> ResidualGroup::borrowed_params() const {
  std::vector<std::string> out;
  for (const auto* list : {&body_, &shortcut_}) {
    for (const auto& layer : *list) {
      for (auto& name : layer->borrowed_params()) out.push_back(std::move(name));
    }
  }
  return out;
}

}  // namespace dtrain::nn
