// build_mlp: the multi-layer perceptron of model_zoo.h, as the layer list mlp_layers(spec):
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
#include "dtrain/nn/init.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

LayerList mlp_layers(const ModelSpec& spec) {
  if (spec.input.empty()) {
    throw ConfigError("model.input: the mlp needs a sample shape such as [784] or [1, 28, 28]");
  }
  for (const std::int64_t d : spec.input) {
    if (d <= 0) {
      throw ConfigError(fmt::format("model.input: dimension {} in {} must be > 0", d,
                                    tensor::shape_str(spec.input)));
    }
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
  parse_init(spec.init);

  const auto named = [](const char* kind, const std::string& name) {
    return LayerSpec{kind, {{"name", name}}, {}, {}};
  };
  LayerList list{named("flatten", "flatten")};
  for (std::size_t i = 0; i < spec.hidden.size(); ++i) {
    const std::string index = std::to_string(i + 1);
    LayerSpec fc = named("linear", "fc" + index);
    fc.params["out_features"] = spec.hidden[i];
    list.push_back(std::move(fc));
    LayerSpec act = named(spec.activation.c_str(), "act" + index);
    // Only these two read alpha (a layer list refuses it elsewhere).
    if (activation == ActivationKind::kLeakyRelu || activation == ActivationKind::kElu) {
      act.params["alpha"] = static_cast<double>(spec.activation_alpha);
    }
    list.push_back(std::move(act));
    if (spec.dropout > 0.0f) {
      LayerSpec drop = named("dropout", "drop" + index);
      drop.params["p"] = static_cast<double>(spec.dropout);
      list.push_back(std::move(drop));
    }
  }
  LayerSpec out = named("linear", "fc" + std::to_string(spec.hidden.size() + 1));
  out.params["out_features"] = std::string("classes");
  list.push_back(std::move(out));
  return list;
}

std::unique_ptr<Model> build_mlp(const ModelSpec& spec) {
  return build_layer_list(mlp_layers(spec),
                          LayerListInput{spec.input, spec.num_classes, spec.init, spec.init_sigma},
                          "mlp layer");
}

}  // namespace dtrain::nn
