// build_lenet5: the LeNet-5-style CNN of model_zoo.h (the layer list lenet5_layers(spec)), layer
// for layer the PyTorch model of ../shared/peers/scripts/fmnist.py at input (1, 28, 28):
//
//   conv1 5x5, 6, pad P, act1, pool1 2x2    (B, C, H, W)    -> (B, 6, (H+2P-4)/2, ...)
//   conv2 5x5, 16, act2, pool2 2x2                          -> (B, 16, 5, 5) for 28x28 and 32x32
//   flatten, fc1 120, act3[, drop3], fc2 84, act4[, drop4], fc3 num_classes (logits)
//
// P = 2 for 28x28 (MNIST padded to the 32x32 of the original LeNet-5), 0 for 32x32 and larger:
// P = clamp(ceil((32 - min(H, W)) / 2), 0, 2). C comes from spec.input (1 or 3). The activation is
// spec.activation (ReLU by default, as the peer), dropout after the two hidden dense layers when
// spec.dropout > 0. Parameters at (1, 28, 28): 156 + 2,416 + 48,120 + 10,164 + 850 = 61,706.
// Forward cost at 28x28: about 2 * (6*25*784 + 16*150*100 + 61,706) = 0.9 MFLOP per sample.
#include <algorithm>
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

LayerList lenet5_layers(const ModelSpec& spec) {
  if (spec.input.size() != 3 || spec.input[0] <= 0 || spec.input[1] <= 0 || spec.input[2] <= 0) {
    throw ConfigError(fmt::format(
        "model.input: lenet5 needs an image shape [C, H, W] such as [1, 28, 28] or [3, 32, 32], "
        "got {}",
        tensor::shape_str(spec.input)));
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
  const std::int64_t side = std::min(spec.input[1], spec.input[2]);
  const std::int64_t padding = std::clamp<std::int64_t>((32 - side + 1) / 2, 0, 2);

  LayerList list;
  const auto add = [&](const char* kind, const char* name,
                       std::map<std::string, LayerParam> params = {}) {
    params["name"] = std::string(name);
    list.push_back(LayerSpec{kind, std::move(params), {}, {}});
  };
  const auto act = [&](const char* name) {
    std::map<std::string, LayerParam> params;
    // Only these two read alpha (a layer list refuses it elsewhere).
    if (activation == ActivationKind::kLeakyRelu || activation == ActivationKind::kElu) {
      params["alpha"] = static_cast<double>(spec.activation_alpha);
    }
    add(spec.activation.c_str(), name, std::move(params));
  };
  const auto drop = [&](const char* name) {
    if (spec.dropout > 0.0f) add("dropout", name, {{"p", static_cast<double>(spec.dropout)}});
  };
  std::map<std::string, LayerParam> conv1{{"out_channels", std::int64_t{6}},
                                          {"kernel", std::int64_t{5}}};
  if (padding > 0) conv1["padding"] = padding;
  add("conv2d", "conv1", std::move(conv1));
  act("act1");
  add("max_pool2d", "pool1", {{"kernel", std::int64_t{2}}});
  add("conv2d", "conv2", {{"out_channels", std::int64_t{16}}, {"kernel", std::int64_t{5}}});
  act("act2");
  add("max_pool2d", "pool2", {{"kernel", std::int64_t{2}}});
  // The flattened width follows from the shapes (16 * 5 * 5 at 28x28 and 32x32); a too-small input
  // fails with the ShapeError of the first layer that does not fit.
  add("flatten", "flatten");
  add("linear", "fc1", {{"out_features", std::int64_t{120}}});
  act("act3");
  drop("drop3");
  add("linear", "fc2", {{"out_features", std::int64_t{84}}});
  act("act4");
  drop("drop4");
  add("linear", "fc3", {{"out_features", std::string("classes")}});
  return list;
}

std::unique_ptr<Model> build_lenet5(const ModelSpec& spec) {
  return build_layer_list(lenet5_layers(spec),
                          LayerListInput{spec.input, spec.num_classes, spec.init, spec.init_sigma},
                          "lenet5 layer");
}

}  // namespace dtrain::nn
