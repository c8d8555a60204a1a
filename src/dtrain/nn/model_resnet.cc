// build_resnet: a small CIFAR-style ResNet with batch norm (He et al., 2016, section 4.2) for
// 28x28 and 32x32 images, w = spec.resnet_width, n = spec.resnet_blocks:
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
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/residual_block.h"

namespace dtrain::nn {

std::unique_ptr<Model> build_resnet(const ModelSpec& spec) {
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
  const InitKind init = parse_init(spec.init);
  const std::int64_t width = spec.resnet_width;

  auto model = std::make_unique<Model>(spec.input);
  model->add(std::make_unique<Conv2d>("conv1", spec.input[0], width, 3, 1, 1, /*bias=*/false, init,
                                      spec.init_sigma));
  model->add(std::make_unique<BatchNorm>("bn1", width));
  model->add(std::make_unique<Activation>("act1", ActivationKind::kRelu));
  std::int64_t channels = width;
  for (int stage = 1; stage <= 3; ++stage) {
    const std::int64_t stage_width = width << (stage - 1);
    for (std::int64_t block = 1; block <= spec.resnet_blocks; ++block) {
      const std::int64_t stride = stage > 1 && block == 1 ? 2 : 1;
      model->add(std::make_unique<ResidualBlock>(fmt::format("stage{}.block{}", stage, block),
                                                 channels, stage_width, stride, init,
                                                 spec.init_sigma));
      channels = stage_width;
    }
  }
  model->add(AvgPool2d::global("pool"));
  model->add(std::make_unique<Flatten>("flatten"));
  model->add(std::make_unique<Linear>("fc", channels, spec.num_classes, init, spec.init_sigma));
  model->build();
  return model;
}

}  // namespace dtrain::nn
