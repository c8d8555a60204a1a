#include "dtrain/nn/parameter_count.h"

#include <gtest/gtest.h>

#include <limits>

namespace dtrain::nn {
namespace {

// The closed form against the built model's ParamStore.
void expect_counts_as_built(const ModelSpec& spec) {
  const auto counted = count_model_size(spec);
  ASSERT_TRUE(counted.has_value()) << spec.name;
  const auto model = build_model(spec);
  EXPECT_EQ(counted->parameters, model->store().num_params()) << spec.name;
  EXPECT_EQ(counted->buffers, model->store().num_buffer_elements()) << spec.name;
}

TEST(ParameterCount, EveryModelOfTheZooAsBuilt) {
  ModelSpec mlp;
  mlp.hidden = {32, 16, 8};
  expect_counts_as_built(mlp);
  mlp.hidden = {};
  expect_counts_as_built(mlp);

  ModelSpec lenet;
  lenet.name = "lenet5";
  expect_counts_as_built(lenet);
  lenet.input = {3, 32, 32};
  expect_counts_as_built(lenet);
  lenet.input = {1, 40, 36};
  expect_counts_as_built(lenet);

  ModelSpec resnet;
  resnet.name = "resnet";
  resnet.resnet_width = 4;
  expect_counts_as_built(resnet);
  resnet.resnet_blocks = 2;
  resnet.input = {3, 32, 32};
  expect_counts_as_built(resnet);

  ModelSpec gpt;
  gpt.name = "gpt";
  gpt.d_model = 32;
  gpt.heads = 2;
  gpt.layers = 2;
  gpt.block = 16;
  expect_counts_as_built(gpt);
}

TEST(ParameterCount, HugeModelsWithoutBuildingThem) {
  ModelSpec mlp;
  mlp.hidden = {200000, 200000};
  const auto size = count_model_size(mlp);
  ASSERT_TRUE(size.has_value());
  EXPECT_EQ(size->parameters,
            std::int64_t{785} * 200000 + std::int64_t{200001} * 200000 + 200001 * 10);
  mlp.hidden = {std::int64_t{1} << 40, std::int64_t{1} << 40};
  EXPECT_EQ(count_model_size(mlp)->parameters, std::numeric_limits<std::int64_t>::max());
}

TEST(ParameterCount, SpecsBuildModelRejectsAreNotCounted) {
  ModelSpec spec;
  spec.hidden = {0};
  EXPECT_FALSE(count_model_size(spec).has_value());
  spec.name = "transformer";
  EXPECT_FALSE(count_model_size(spec).has_value());
  spec.name = "lenet5";
  spec.input = {1, 4, 4};  // too small for the convolutions
  EXPECT_FALSE(count_model_size(spec).has_value());
}

}  // namespace
}  // namespace dtrain::nn
