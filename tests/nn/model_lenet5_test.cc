// build_lenet5: shapes at 28x28 and 32x32, the PyTorch parameter count, layer names,
// reproducibility, and that its backward pass descends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/model_zoo.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::random_tensor;

ModelSpec lenet_spec(tensor::Shape input) {
  ModelSpec spec;
  spec.name = "lenet5";
  spec.input = std::move(input);
  return spec;
}

TEST(Lenet5, ShapesAndParameterCountAt28) {
  auto model = build_model(lenet_spec({1, 28, 28}));
  EXPECT_EQ(model->output_shape(128), (tensor::Shape{128, 10}));
  // PyTorch's nn.Sequential of ../shared/peers/scripts/fmnist.py: 156 + 2416 + 48120 + 10164 + 850.
  EXPECT_EQ(model->store().num_params(), 61706);
  std::vector<std::string> names;
  for (const auto& layer : model->layers()) names.push_back(layer->name());
  EXPECT_THAT(names, ::testing::ElementsAre("conv1", "act1", "pool1", "conv2", "act2", "pool2",
                                            "flatten", "fc1", "act3", "fc2", "act4", "fc3"));
  const auto& conv1 = dynamic_cast<const Conv2d&>(*model->layers()[0]);
  EXPECT_EQ(conv1.padding(), 2);
  EXPECT_EQ(model->store().param_entries()[0].name, "conv1.weight");
  EXPECT_EQ(model->store().param_entries()[0].shape, (tensor::Shape{6, 1, 5, 5}));
}

TEST(Lenet5, ShapesAt32WithThreeChannels) {
  auto model = build_model(lenet_spec({3, 32, 32}));
  EXPECT_EQ(model->output_shape(4), (tensor::Shape{4, 10}));
  const auto& conv1 = dynamic_cast<const Conv2d&>(*model->layers()[0]);
  EXPECT_EQ(conv1.padding(), 0);
  EXPECT_EQ(conv1.in_channels(), 3);
  // conv1 6*75 + 6 = 456 instead of 156; the rest (flatten still 16*5*5) unchanged.
  EXPECT_EQ(model->store().num_params(), 61706 - 156 + 456);
  model->init(3);
  const tensor::Tensor x = random_tensor({4, 3, 32, 32}, 4);
  EXPECT_EQ(model->forward(x, ForwardContext{}).shape(), (tensor::Shape{4, 10}));
}

TEST(Lenet5, SameSeedSameBitsOtherSeedOtherBits) {
  const tensor::Tensor x = random_tensor({8, 1, 28, 28}, 9);
  auto run = [&](std::uint64_t seed) {
    auto model = build_model(lenet_spec({1, 28, 28}));
    model->init(seed);
    return model->forward(x, ForwardContext{}).to_vector();
  };
  const auto a = run(42), b = run(42), c = run(43);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
}

// A small step against the gradient of L = sum(r * logits) lowers L by about lr * |grad|^2: the
// model's backward is the gradient of its forward, end to end.
TEST(Lenet5, BackwardDescends) {
  auto model = build_model(lenet_spec({1, 28, 28}));
  model->init(1);
  const tensor::Tensor x = random_tensor({4, 1, 28, 28}, 2);
  const tensor::Tensor r = random_tensor({4, 10}, 3);
  testing::expect_first_order_descent(*model, x, r);
}

TEST(Lenet5, RejectsBadSpecs) {
  EXPECT_THROW(build_model(lenet_spec({784})), ConfigError);
  EXPECT_THROW(build_model(lenet_spec({1, 28, 0})), ConfigError);
  // 12x12 padded by 2 is 16: conv1 -> 12, pool1 -> 6, conv2 -> 2, pool2 -> 1; 8x8 is too small.
  EXPECT_NO_THROW(build_model(lenet_spec({1, 12, 12})));
  EXPECT_THAT(
      [] {
        build_model(lenet_spec({1, 8, 8}));
      },
      ::testing::ThrowsMessage<ShapeError>(::testing::HasSubstr("conv2")));
  ModelSpec spec = lenet_spec({1, 28, 28});
  spec.init = "glorot";
  EXPECT_THROW(build_model(spec), ConfigError);
}

TEST(Lenet5, DropoutAfterTheHiddenDenseLayers) {
  ModelSpec spec = lenet_spec({1, 28, 28});
  spec.dropout = 0.5f;
  auto model = build_model(spec);
  std::vector<std::string> names;
  for (const auto& layer : model->layers()) names.push_back(layer->name());
  EXPECT_THAT(names, ::testing::Contains("drop3"));
  EXPECT_THAT(names, ::testing::Contains("drop4"));
  EXPECT_EQ(model->store().num_params(), 61706);
}

}  // namespace
}  // namespace dtrain::nn
