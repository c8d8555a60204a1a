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

// Each zoo model written as its layer list (model.name = "layers"), counted without allocating.
TEST(ParameterCount, LayerListsAsBuilt) {
  ModelSpec mlp;
  mlp.hidden = {32, 16};
  ModelSpec lenet;
  lenet.name = "lenet5";
  ModelSpec resnet;
  resnet.name = "resnet";
  resnet.resnet_width = 4;
  ModelSpec gpt;
  gpt.name = "gpt";
  gpt.d_model = 32;
  gpt.heads = 2;
  gpt.layers = 2;
  gpt.block = 16;
  for (const auto& [zoo, layers] :
       {std::pair{mlp, mlp_layers(mlp)}, std::pair{lenet, lenet5_layers(lenet)},
        std::pair{resnet, resnet_layers(resnet)}, std::pair{gpt, gpt_layers(gpt)}}) {
    ModelSpec spec = zoo;
    spec.name = "layers";
    spec.layer_list = layers;
    if (zoo.name == "gpt") {  // a text data set: windows of `block` bytes, `vocab` classes
      spec.input = {zoo.block};
      spec.num_classes = zoo.vocab;
    }
    expect_counts_as_built(spec);
    EXPECT_EQ(count_model_size(spec)->parameters, count_model_size(zoo)->parameters) << zoo.name;
  }
  // A list whose model would not fit anywhere is counted, not built.
  ModelSpec huge;
  huge.hidden = {200000, 200000};
  ModelSpec listed = huge;
  listed.name = "layers";
  listed.layer_list = mlp_layers(huge);
  EXPECT_EQ(count_model_size(listed)->parameters, count_model_size(huge)->parameters);
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
