// build_mlp: the multi-layer perceptron of model_zoo.h.
//
//   flatten                        (B, input...) -> (B, F),  F = prod(spec.input)
//   fc1, act1[, drop1]             (B, F)        -> (B, hidden[0])
//   ...
//   fcK, actK[, dropK]             (B, hidden[K-2]) -> (B, hidden[K-1])
//   fc{K+1}                        (B, hidden[K-1]) -> (B, num_classes)   logits, no activation
//
// Parameters: sum over the dense layers of (in + 1) * out; forward cost about 2 * B * that FLOPs.
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/dropout.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

std::unique_ptr<Model> build_mlp(const ModelSpec& spec) {
  if (spec.input.empty()) {
    throw ConfigError("model.input: the mlp needs a sample shape such as [784] or [1, 28, 28]");
  }
  std::int64_t features = 1;
  for (const std::int64_t d : spec.input) {
    if (d <= 0) {
      throw ConfigError(fmt::format("model.input: dimension {} in {} must be > 0", d,
                                    tensor::shape_str(spec.input)));
    }
    features *= d;
  }
  for (std::size_t i = 0; i < spec.hidden.size(); ++i) {
    if (spec.hidden[i] <= 0) {
      throw ConfigError(fmt::format(
          "model.hidden: width {} at position {} must be > 0 (got {}); give positive layer widths",
          spec.hidden[i], i, tensor::shape_str(spec.hidden)));
    }
  }
  if (spec.num_classes <= 0) {
    throw ConfigError(fmt::format("model.num_classes: must be > 0, got {}", spec.num_classes));
  }
  if (!(spec.dropout >= 0.0f && spec.dropout < 1.0f)) {
    throw ConfigError(
        fmt::format("model.dropout: {} out of range [0, 1); 0 turns dropout off", spec.dropout));
  }
  const ActivationKind activation = parse_activation(spec.activation);
  const InitKind init = parse_init(spec.init);

  auto model = std::make_unique<Model>(spec.input);
  model->add(std::make_unique<Flatten>("flatten"));
  std::int64_t width = features;
  for (std::size_t i = 0; i < spec.hidden.size(); ++i) {
    const std::string index = std::to_string(i + 1);
    model->add(
        std::make_unique<Linear>("fc" + index, width, spec.hidden[i], init, spec.init_sigma));
    model->add(std::make_unique<Activation>("act" + index, activation, spec.activation_alpha));
    if (spec.dropout > 0.0f) model->add(std::make_unique<Dropout>("drop" + index, spec.dropout));
    width = spec.hidden[i];
  }
  model->add(std::make_unique<Linear>("fc" + std::to_string(spec.hidden.size() + 1), width,
                                      spec.num_classes, init, spec.init_sigma));
  model->build();
  return model;
}

}  // namespace dtrain::nn
