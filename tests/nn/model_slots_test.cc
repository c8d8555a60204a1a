// Micro-batch slots (Model::reserve_slots), the forward hook and model partitioning
// (model_partition.h): two micro-batches forwarded into two slots and then backwarded in either
// order give the gradients of running them one after the other, for every layer kind.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/dropout.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/layer_list.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/max_pool2d.h"
#include "dtrain/nn/model_partition.h"
#include "dtrain/nn/model_zoo.h"
#include "model_inputs.h"

namespace dtrain::nn {
namespace {

using tensor::Shape;
using tensor::Tensor;

// Conv2d, BatchNorm, Activation, MaxPool2d, AvgPool2d, Flatten, Dropout, Linear: the layer kinds
// the zoo's models below do not all cover.
std::unique_ptr<Model> every_kind_model() {
  auto model = std::make_unique<Model>(Shape{1, 8, 8});
  model->add(std::make_unique<Conv2d>("conv", 1, 4, 3, 1, 1));
  model->add(std::make_unique<BatchNorm>("bn", 4));
  model->add(std::make_unique<Activation>("act", ActivationKind::kElu, 0.5f));
  model->add(std::make_unique<MaxPool2d>("max", 2, 2));
  model->add(std::make_unique<AvgPool2d>("avg", 2, 2));
  model->add(std::make_unique<Flatten>("flatten"));
  model->add(std::make_unique<Dropout>("drop", 0.3f));
  model->add(std::make_unique<Linear>("fc", 16, 5));
  model->build();
  return model;
}

ModelSpec spec_for(const std::string& name) {
  ModelSpec spec;
  spec.name = name;
  if (name == "mlp") {
    spec.input = {1, 6, 6};
    spec.hidden = {12, 8};
    spec.activation = "gelu";
    spec.dropout = 0.25f;
  } else if (name == "resnet") {
    spec.input = {3, 8, 8};
    spec.resnet_width = 4;
    spec.resnet_blocks = 1;
  } else if (name == "gpt") {
    spec.vocab = 11;
    spec.block = 6;
    spec.d_model = 8;
    spec.heads = 2;
    spec.layers = 2;
  }
  return spec;
}

// A layer list with residual groups (layer_list.h): a projection group with a relu after the sum,
// then a pre-norm group of layer norm and GELU with an identity shortcut.
std::unique_ptr<Model> residual_group_model() {
  const auto conv = [](std::int64_t out, std::int64_t kernel, std::int64_t stride) {
    return LayerSpec{"conv2d",
                     {{"out_channels", out},
                      {"kernel", kernel},
                      {"stride", stride},
                      {"padding", (kernel - 1) / 2}},
                     {},
                     {}};
  };
  const LayerSpec bn{"batch_norm", {}, {}, {}};
  const LayerList list = {
      LayerSpec{"residual",
                {{"activation", std::string("relu")}},
                {conv(4, 3, 2), bn, LayerSpec{"relu", {}, {}, {}}, conv(4, 3, 1)},
                {conv(4, 1, 2), bn}},
      LayerSpec{"flatten", {}, {}, {}},
      LayerSpec{
          "residual", {}, {LayerSpec{"layer_norm", {}, {}, {}}, LayerSpec{"gelu", {}, {}, {}}}, {}},
      LayerSpec{"linear", {{"out_features", std::string("classes")}}, {}, {}}};
  return build_layer_list(list, LayerListInput{{1, 8, 8}, 5});
}

std::unique_ptr<Model> make(const std::string& name) {
  if (name == "every_kind") return every_kind_model();
  if (name == "residual_group") return residual_group_model();
  return build_model(spec_for(name));
}

using testing::grads_of;

ForwardContext context(std::int64_t step, std::size_t slot) {
  return ForwardContext{Mode::kTrain, 5, step, slot};
}

std::vector<float> buffers_of(const Model& model) {
  const ParamStore& store = model.store();
  return {store.buffers(), store.buffers() + store.num_buffer_elements()};
}

class SlotsTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SlotsTest, TwoSlotsEqualOneAfterTheOtherInEitherBackwardOrder) {
  const std::string name = GetParam();
  auto reference = make(name);
  reference->init(3);
  const Tensor x0 = testing::model_input(*reference, name, 3, 1);
  const Tensor x1 = testing::model_input(*reference, name, 2, 2);
  const Tensor dy0 = testing::random_normal(reference->output_shape(3), 3);
  const Tensor dy1 = testing::random_normal(reference->output_shape(2), 4);

  // One after the other, slot 0 only: forward 0, backward 0, forward 1, backward 1.
  reference->store().zero_grads();
  const Tensor y0 = reference->forward(x0, context(10, 0)).clone();
  reference->backward(dy0);
  const Tensor y1 = reference->forward(x1, context(11, 0)).clone();
  reference->backward(dy1);
  const std::vector<float> expected = grads_of(*reference);
  const std::vector<float> expected_buffers = buffers_of(*reference);

  for (const bool reverse : {false, true}) {
    SCOPED_TRACE(reverse ? "backward 1 then 0" : "backward 0 then 1");
    auto model = make(name);
    model->init(3);
    model->reserve_slots(2);
    ASSERT_EQ(model->slots(), 2u);
    model->store().zero_grads();
    const Tensor& out0 = model->forward(x0, context(10, 0));
    const Tensor& out1 = model->forward(x1, context(11, 1));
    // Both outputs stay valid side by side: each slot owns its buffers.
    ASSERT_EQ(out0.numel(), y0.numel());
    ASSERT_EQ(out1.numel(), y1.numel());
    for (std::int64_t i = 0; i < y0.numel(); ++i) ASSERT_EQ(out0.data()[i], y0.data()[i]);
    for (std::int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(out1.data()[i], y1.data()[i]);
    const LayerRange all{0, model->layers().size()};
    if (reverse) {
      model->backward_range(dy1, all, 1, false);
      model->backward_range(dy0, all, 0, false);
    } else {
      model->backward_range(dy0, all, 0, false);
      model->backward_range(dy1, all, 1, false);
    }
    const std::vector<float> got = grads_of(*model);
    ASSERT_EQ(got.size(), expected.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      if (reverse) {
        // The sum of the same two terms in the other order: equal up to rounding.
        ASSERT_NEAR(got[i], expected[i], 1e-5f * (1.0f + std::fabs(expected[i]))) << "at " << i;
      } else {
        ASSERT_EQ(got[i], expected[i]) << "at " << i;  // the same arithmetic: bitwise
      }
    }
    // Batch-norm running statistics follow the forwards, in the same order: bitwise.
    EXPECT_EQ(buffers_of(*model), expected_buffers);
  }
}

INSTANTIATE_TEST_SUITE_P(EveryLayerKind, SlotsTest,
                         ::testing::Values("every_kind", "residual_group", "mlp", "lenet5",
                                           "resnet", "gpt"));

TEST(Slots, StagesInSlotsEqualTheWholeModel) {
  // Forwarding a model stage by stage (ranges) in a slot and backwarding stage by stage with the
  // input gradient handed down gives the whole model's output and gradients, bitwise.
  auto whole = make("gpt");
  whole->init(1);
  auto staged = make("gpt");
  staged->init(1);
  staged->reserve_slots(3);
  const Tensor x = testing::model_input(*whole, "gpt", 2, 5);
  const Tensor dy = testing::random_normal(whole->output_shape(2), 6);
  whole->store().zero_grads();
  const Tensor y = whole->forward(x, context(0, 0)).clone();
  whole->backward(dy);
  staged->store().zero_grads();
  const auto ranges = partition_by_count(staged->layers().size(), 3);
  const Tensor* h = &x;
  for (const LayerRange& range : ranges) h = &staged->forward_range(*h, context(0, 2), range);
  for (std::int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(h->data()[i], y.data()[i]);
  const Tensor* g = &dy;
  for (std::size_t s = ranges.size(); s-- > 0;) {
    g = &staged->backward_range(*g, ranges[s], 2, /*input_grad=*/s > 0);
    if (s > 0) {
      ASSERT_GT(g->numel(), 0);  // the gradient the stage would send back
    }
  }
  EXPECT_EQ(grads_of(*staged), grads_of(*whole));
}

TEST(Slots, ForwardHookRunsBeforeEachLayerInOrder) {
  auto model = make("mlp");
  model->init(1);
  std::vector<std::size_t> seen;
  model->forward(testing::model_input(*model, "mlp", 2, 1), context(0, 0),
                 [&](std::size_t layer) { seen.push_back(layer); });
  ASSERT_EQ(seen.size(), model->layers().size());
  for (std::size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i], i);
}

TEST(Slots, UsingAnUnreservedSlotIsABug) {
  auto model = make("mlp");
  model->init(1);
  EXPECT_THROW(model->forward(testing::model_input(*model, "mlp", 2, 1), context(0, 1)),
               InternalError);
}

TEST(Partition, ByCountGivesTheFirstStagesTheExtraLayers) {
  const auto ranges = partition_by_count(10, 4);
  ASSERT_EQ(ranges.size(), 4u);
  EXPECT_EQ(ranges[0], (LayerRange{0, 3}));
  EXPECT_EQ(ranges[1], (LayerRange{3, 6}));
  EXPECT_EQ(ranges[2], (LayerRange{6, 8}));
  EXPECT_EQ(ranges[3], (LayerRange{8, 10}));
  EXPECT_EQ(partition_by_count(3, 3)[2], (LayerRange{2, 3}));
}

TEST(Partition, FewerLayersThanStagesIsAConfigErrorNamingBoth) {
  try {
    partition_by_count(3, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("3 layers"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("4 pipeline stages"), std::string::npos) << e.what();
  }
  const std::vector<double> costs{1.0, 2.0};
  EXPECT_THROW(partition_balanced(costs, 3), ConfigError);
}

TEST(Partition, BalancedMinimizesTheLargestStage) {
  // The embedding is cheap, the head expensive: balancing moves the cut.
  const std::vector<double> costs{1, 4, 4, 4, 4, 1, 8};
  const auto two = partition_balanced(costs, 2);
  EXPECT_EQ(two[0], (LayerRange{0, 4}));  // 13 | 13
  EXPECT_EQ(two[1], (LayerRange{4, 7}));
  const auto three = partition_balanced(costs, 3);
  double largest = 0;
  for (const auto& r : three) {
    double sum = 0;
    for (std::size_t i = r.begin; i < r.end; ++i) sum += costs[i];
    largest = std::max(largest, sum);
  }
  EXPECT_EQ(largest, 9.0);  // {1,4,4} {4,4,1} {8}
  // Contiguous and covering.
  EXPECT_EQ(three.front().begin, 0u);
  EXPECT_EQ(three.back().end, costs.size());
  for (std::size_t s = 1; s < three.size(); ++s) EXPECT_EQ(three[s].begin, three[s - 1].end);
  // Equal costs: as even as by count.
  const std::vector<double> flat(8, 1.0);
  for (const auto& r : partition_balanced(flat, 4)) EXPECT_EQ(r.size(), 2u);
}

TEST(Partition, MeasuredCostsLeaveTheModelAsItWas) {
  auto model = make("resnet");
  model->init(2);
  const std::vector<float> params(model->store().params(),
                                  model->store().params() + model->store().num_params());
  const std::vector<float> buffers = buffers_of(*model);
  const auto costs = measure_layer_costs(*model, testing::model_input(*model, "resnet", 4, 1), 2);
  ASSERT_EQ(costs.size(), model->layers().size());
  for (double c : costs) EXPECT_GE(c, 0.0);
  EXPECT_EQ(buffers_of(*model), buffers);
  EXPECT_EQ(std::vector<float>(model->store().params(),
                               model->store().params() + model->store().num_params()),
            params);
  for (float g : grads_of(*model)) ASSERT_EQ(g, 0.0f);
}

}  // namespace
}  // namespace dtrain::nn
