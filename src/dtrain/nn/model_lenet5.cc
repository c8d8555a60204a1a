// build_lenet5: the LeNet-5-style CNN of model_zoo.h, layer for layer the PyTorch model of
// ../shared/peers/scripts/fmnist.py at input (1, 28, 28):
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
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/dropout.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

std::unique_ptr<Model> build_lenet5(const ModelSpec& spec) {
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
  const InitKind init = parse_init(spec.init);
  const float sigma = spec.init_sigma;
  const float alpha = spec.activation_alpha;
  const std::int64_t channels = spec.input[0];
  const std::int64_t side = std::min(spec.input[1], spec.input[2]);
  const std::int64_t padding = std::clamp<std::int64_t>((32 - side + 1) / 2, 0, 2);

  auto model = std::make_unique<Model>(spec.input);
  model->add(std::make_unique<Conv2d>("conv1", channels, 6, 5, 1, padding, true, init, sigma));
  model->add(std::make_unique<Activation>("act1", activation, alpha));
  model->add(std::make_unique<MaxPool2d>("pool1", 2, 2));
  model->add(std::make_unique<Conv2d>("conv2", 6, 16, 5, 1, 0, true, init, sigma));
  model->add(std::make_unique<Activation>("act2", activation, alpha));
  model->add(std::make_unique<MaxPool2d>("pool2", 2, 2));
  model->add(std::make_unique<Flatten>("flatten"));
  // The flattened width follows from the shapes (16 * 5 * 5 at 28x28 and 32x32); a too-small input
  // already fails here with the ShapeError of the first layer that does not fit.
  tensor::Shape shape{1};
  shape.insert(shape.end(), spec.input.begin(), spec.input.end());
  for (const auto& layer : model->layers()) shape = layer->output_shape(shape);
  const std::int64_t flat = shape[1];
  model->add(std::make_unique<Linear>("fc1", flat, 120, init, sigma));
  model->add(std::make_unique<Activation>("act3", activation, alpha));
  if (spec.dropout > 0.0f) model->add(std::make_unique<Dropout>("drop3", spec.dropout));
  model->add(std::make_unique<Linear>("fc2", 120, 84, init, sigma));
  model->add(std::make_unique<Activation>("act4", activation, alpha));
  if (spec.dropout > 0.0f) model->add(std::make_unique<Dropout>("drop4", spec.dropout));
  model->add(std::make_unique<Linear>("fc3", 84, spec.num_classes, init, sigma));
  model->build();
  return model;
}

}  // namespace dtrain::nn
