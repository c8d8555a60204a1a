// build_resnet: shapes at 28x28 and 32x32, the parameter count worked by hand, names, batch-norm
// buffers, reproducibility, train vs eval, and that its backward pass descends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/residual_block.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::random_tensor;

ModelSpec resnet_spec(tensor::Shape input, std::int64_t width = 16, std::int64_t blocks = 1) {
  ModelSpec spec;
  spec.name = "resnet";
  spec.input = std::move(input);
  spec.resnet_width = width;
  spec.resnet_blocks = blocks;
  return spec;
}

// w = 16, n = 1, 1 input channel:
//   conv1 16*1*9 = 144, bn1 32                                              176
//   stage1.block1 (16 -> 16): 2304 + 32 + 2304 + 32                        4,672
//   stage2.block1 (16 -> 32): 4608 + 64 + 9216 + 64 + 512 + 64            14,528
//   stage3.block1 (32 -> 64): 18432 + 128 + 36864 + 128 + 2048 + 128       57,728
//   fc 64*10 + 10                                                            650
TEST(Resnet, ShapesAndParameterCountByHand) {
  auto model = build_model(resnet_spec({1, 28, 28}));
  EXPECT_EQ(model->output_shape(8), (tensor::Shape{8, 10}));
  EXPECT_EQ(model->store().num_params(), 176 + 4672 + 14528 + 57728 + 650);
  std::vector<std::string> names;
  for (const auto& layer : model->layers()) names.push_back(layer->name());
  EXPECT_THAT(names,
              ::testing::ElementsAre("conv1", "bn1", "act1", "stage1.block1", "stage2.block1",
                                     "stage3.block1", "pool", "flatten", "fc"));
  // Shapes through the stages: 28 -> 28 -> 14 -> 7 -> 1.
  tensor::Shape shape{2, 1, 28, 28};
  std::vector<tensor::Shape> shapes;
  for (const auto& layer : model->layers()) shapes.push_back(shape = layer->output_shape(shape));
  EXPECT_EQ(shapes[3], (tensor::Shape{2, 16, 28, 28}));
  EXPECT_EQ(shapes[4], (tensor::Shape{2, 32, 14, 14}));
  EXPECT_EQ(shapes[5], (tensor::Shape{2, 64, 7, 7}));
  EXPECT_EQ(shapes[6], (tensor::Shape{2, 64, 1, 1}));
  // Running statistics: bn1 plus two or three batch norms per block, two buffers each.
  EXPECT_EQ(model->store().buffer_entries().size(), 2u * (1 + 2 + 3 + 3));
}

TEST(Resnet, DeeperAndWiderAt32WithThreeChannels) {
  auto model = build_model(resnet_spec({3, 32, 32}, 8, 2));
  EXPECT_EQ(model->output_shape(2), (tensor::Shape{2, 10}));
  // 3 stages x 2 blocks; the first block of stages 2 and 3 projects, the others are identity.
  std::vector<bool> projections;
  for (const auto& layer : model->layers()) {
    if (const auto* block = dynamic_cast<const ResidualBlock*>(layer.get())) {
      projections.push_back(block->has_projection());
    }
  }
  EXPECT_EQ(projections, (std::vector<bool>{false, false, true, false, true, false}));
  tensor::Shape shape{2, 3, 32, 32};
  for (std::size_t i = 0; i + 3 < model->layers().size(); ++i) {
    shape = model->layers()[i]->output_shape(shape);
  }
  EXPECT_EQ(shape, (tensor::Shape{2, 32, 8, 8}));  // 32 -> 16 -> 8, width 4w
  model->init(5);
  const tensor::Tensor x = random_tensor({2, 3, 32, 32}, 6);
  EXPECT_EQ(model->forward(x, ForwardContext{}).shape(), (tensor::Shape{2, 10}));
}

TEST(Resnet, SameSeedSameBitsAndEvalDiffersFromTrain) {
  const tensor::Tensor x = random_tensor({4, 1, 28, 28}, 9);
  auto run = [&](std::uint64_t seed, Mode mode) {
    auto model = build_model(resnet_spec({1, 28, 28}, 4, 1));
    model->init(seed);
    ForwardContext ctx;
    ctx.mode = mode;
    return model->forward(x, ctx).to_vector();
  };
  const auto a = run(42, Mode::kTrain);
  EXPECT_EQ(a, run(42, Mode::kTrain));
  EXPECT_NE(a, run(43, Mode::kTrain));
  // Fresh running statistics (0, 1) normalize differently from the batch statistics.
  EXPECT_NE(a, run(42, Mode::kEval));
}

TEST(Resnet, BackwardDescends) {
  auto model = build_model(resnet_spec({1, 28, 28}, 4, 1));
  model->init(1);
  const tensor::Tensor x = random_tensor({4, 1, 28, 28}, 2);
  const tensor::Tensor r = random_tensor({4, 10}, 3);
  testing::expect_first_order_descent(*model, x, r);
}

TEST(Resnet, RejectsBadSpecs) {
  EXPECT_THROW(build_model(resnet_spec({784})), ConfigError);
  EXPECT_THROW(build_model(resnet_spec({1, 28, 28}, 0, 1)), ConfigError);
  EXPECT_THROW(build_model(resnet_spec({1, 28, 28}, 16, 0)), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
