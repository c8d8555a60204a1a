// build_resnet: the layer list resnet_layers(spec), a small CIFAR-style ResNet with batch norm
// (He et al., 2016, section 4.2) for 28x28 and 32x32 images, w = spec.resnet_width,
// n = spec.resnet_blocks:
//
//   conv1 3x3 w (no bias), bn1, act1                      (B, C, H, W)   -> (B, w, H, W)
//   stage1.block1..n   ResidualBlock(w)                                  -> (B, w, H, W)
//   stage2.block1..n   ResidualBlock(2w), stride 2 in block1             -> (B, 2w, H/2, W/2)
//   stage3.block1..n   ResidualBlock(4w), stride 2 in block1             -> (B, 4w, H/4, W/4)
//   pool (global average), flatten, fc num_classes (logits)              -> (B, num_classes)
// (H/2 rounds up: 28 -> 14 -> 7, 32 -> 16 -> 8.) The first block of stages 2 and 3 has a 1x1
// projection shortcut; the others are identity. With n blocks per stage there are 6n + 2 weighted
// layers: n = 3 is ResNet-20. Parameters at w = 16, n = 1, (1, 28, 28): 77,754. Forward cost is
// about 108 * n * w^2 * H * W FLOPs per sample (each stage costs the same: a quarter of the pixels,
// four times the channel products), 22 MFLOP at w = 16, n = 1, 28x28.
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/model_zoo.h"

namespace dtrain::nn {

LayerList resnet_layers(const ModelSpec& spec) {
  if (spec.input.size() != 3 || spec.input[0] <= 0 || spec.input[1] <= 0 || spec.input[2] <= 0) {
    throw ConfigError(fmt::format(
        "model.input: resnet needs an image shape [C, H, W] such as [1, 28, 28] or [3, 32, 32], "
        "got {}",
        tensor::shape_str(spec.input)));
  }
  if (spec.num_classes <= 0) {
    throw ConfigError(fmt::format("model.num_classes: must be > 0, got {}", spec.num_classes));
  }
  if (spec.resnet_width <= 0 || spec.resnet_blocks <= 0) {
    throw ConfigError(fmt::format(
        "model.resnet_width and model.resnet_blocks: must be > 0, got {} and {} (16 and 1 to 3 "
        "are usual)",
        spec.resnet_width, spec.resnet_blocks));
  }
  parse_init(spec.init);
  const std::int64_t width = spec.resnet_width;

  LayerList list;
  const auto add = [&](const char* kind, const std::string& name,
                       std::map<std::string, LayerParam> params = {}) {
    params["name"] = name;
    list.push_back(LayerSpec{kind, std::move(params), {}, {}});
  };
  add("conv2d", "conv1",
      {{"out_channels", width},
       {"kernel", std::int64_t{3}},
       {"padding", std::int64_t{1}},
       {"bias", false}});
  add("batch_norm", "bn1");
  add("relu", "act1");
  for (int stage = 1; stage <= 3; ++stage) {
    const std::int64_t stage_width = width << (stage - 1);
    for (std::int64_t block = 1; block <= spec.resnet_blocks; ++block) {
      std::map<std::string, LayerParam> params{{"out_channels", stage_width}};
      if (stage > 1 && block == 1) params["stride"] = std::int64_t{2};
      add("residual_block", fmt::format("stage{}.block{}", stage, block), std::move(params));
    }
  }
  add("global_avg_pool2d", "pool");
  add("flatten", "flatten");
  add("linear", "fc", {{"out_features", std::string("classes")}});
  return list;
}

std::unique_ptr<Model> build_resnet(const ModelSpec& spec) {
  return build_layer_list(resnet_layers(spec),
                          LayerListInput{spec.input, spec.num_classes, spec.init, spec.init_sigma},
                          "resnet layer");
}

}  // namespace dtrain::nn
