#include "dtrain/nn/parameter_count.h"

#include <algorithm>
#include <limits>

#include "dtrain/base/error.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/layer_list.h"
#include "dtrain/nn/max_pool2d.h"

namespace dtrain::nn {
namespace {

constexpr std::int64_t kSaturated = std::numeric_limits<std::int64_t>::max();

// a x b and a + b that stop at INT64_MAX.
std::int64_t mul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}
std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}

// A dense layer in -> out: weight (out, in) and bias (out).
std::int64_t dense(std::int64_t in, std::int64_t out) { return mul(add(in, 1), out); }

std::optional<ModelSize> count_mlp(const ModelSpec& spec) {
  if (spec.input.empty() || spec.num_classes <= 0) return std::nullopt;
  std::int64_t width = 1;
  for (const std::int64_t d : spec.input) {
    if (d <= 0) return std::nullopt;
    width = mul(width, d);
  }
  ModelSize size;
  for (const std::int64_t hidden : spec.hidden) {
    if (hidden <= 0) return std::nullopt;
    size.parameters = add(size.parameters, dense(width, hidden));
    width = hidden;
  }
  size.parameters = add(size.parameters, dense(width, spec.num_classes));
  return size;
}

std::optional<ModelSize> count_lenet5(const ModelSpec& spec) {
  if (spec.input.size() != 3 || spec.num_classes <= 0) return std::nullopt;
  if (spec.input[0] <= 0 || spec.input[1] <= 0 || spec.input[2] <= 0) return std::nullopt;
  const std::int64_t channels = spec.input[0];
  const std::int64_t side = std::min(spec.input[1], spec.input[2]);
  const std::int64_t padding = std::clamp<std::int64_t>((32 - side + 1) / 2, 0, 2);
  // The flattened width from the layers' own shape rules, as build_lenet5 finds it (the layers
  // hold no tensors until a ParamStore is bound).
  tensor::Shape shape{1, spec.input[0], spec.input[1], spec.input[2]};
  try {
    shape = Conv2d("conv1", channels, 6, 5, 1, padding).output_shape(shape);
    shape = MaxPool2d("pool1", 2, 2).output_shape(shape);
    shape = Conv2d("conv2", 6, 16, 5).output_shape(shape);
    shape = MaxPool2d("pool2", 2, 2).output_shape(shape);
  } catch (const ShapeError&) {
    return std::nullopt;
  }
  const std::int64_t flat = mul(mul(shape[1], shape[2]), shape[3]);
  ModelSize size;
  size.parameters = add(mul(6, add(mul(25, channels), 1)), 16 * (150 + 1));
  size.parameters = add(size.parameters, dense(flat, 120));
  size.parameters = add(size.parameters, dense(120, 84) + dense(84, spec.num_classes));
  return size;
}

std::optional<ModelSize> count_resnet(const ModelSpec& spec) {
  if (spec.input.size() != 3 || spec.num_classes <= 0) return std::nullopt;
  if (spec.input[0] <= 0 || spec.input[1] <= 0 || spec.input[2] <= 0) return std::nullopt;
  if (spec.resnet_width <= 0 || spec.resnet_blocks <= 0) return std::nullopt;
  ModelSize size;
  auto batch_norm = [&](std::int64_t features) {
    size.parameters = add(size.parameters, mul(2, features));
    size.buffers = add(size.buffers, mul(2, features));
  };
  const std::int64_t width = spec.resnet_width;
  size.parameters = mul(mul(9, spec.input[0]), width);  // conv1, no bias
  batch_norm(width);
  std::int64_t channels = width;
  for (int stage = 1; stage <= 3; ++stage) {
    const std::int64_t features = mul(width, std::int64_t{1} << (stage - 1));
    for (std::int64_t block = 1; block <= spec.resnet_blocks; ++block) {
      const bool projection = (stage > 1 && block == 1) || channels != features;
      size.parameters =
          add(size.parameters, mul(9, add(mul(channels, features), mul(features, features))));
      batch_norm(features);
      batch_norm(features);
      if (projection) {
        size.parameters = add(size.parameters, mul(channels, features));
        batch_norm(features);
      }
      channels = features;
    }
  }
  size.parameters = add(size.parameters, dense(channels, spec.num_classes));
  return size;
}

std::optional<ModelSize> count_gpt(const ModelSpec& spec) {
  if (spec.vocab <= 0 || spec.block <= 0 || spec.d_model <= 0 || spec.heads <= 0 ||
      spec.layers <= 0) {
    return std::nullopt;
  }
  // gpt_parameter_count's closed form, saturating: V d + block d + L (12 d^2 + 13 d) + 2 d.
  const std::int64_t d = spec.d_model;
  std::int64_t parameters = add(mul(spec.vocab, d), mul(spec.block, d));
  parameters = add(parameters, mul(spec.layers, add(mul(12, mul(d, d)), mul(13, d))));
  return ModelSize{add(parameters, mul(2, d)), 0};
}

std::optional<ModelSize> count_layers(const ModelSpec& spec) {
  try {
    const LayerListSize size = layer_list_size(
        spec.layer_list, {spec.input, spec.num_classes, spec.init, spec.init_sigma});
    return ModelSize{size.parameters, size.buffers};
  } catch (const Error&) {
    return std::nullopt;  // build_model says what is wrong
  }
}

}  // namespace

std::optional<ModelSize> count_model_size(const ModelSpec& spec) {
  if (spec.name == "mlp") return count_mlp(spec);
  if (spec.name == "lenet5") return count_lenet5(spec);
  if (spec.name == "resnet") return count_resnet(spec);
  if (spec.name == "gpt") return count_gpt(spec);
  if (spec.name == "layers") return count_layers(spec);
  return std::nullopt;
}

}  // namespace dtrain::nn
