// clone() of the tensor-parallel layers (column/row-parallel and all-gather Linear, the split
// attention and the split transformer block): a split model with two micro-batch slots
// (Model::reserve_slots) forwards two micro-batches side by side and, backwarded in slot order,
// gives bitwise the gradients of running them one after the other in one slot; the replicas share
// the parameters and the tensor group. On a 1-rank group (the collectives are identities here;
// tests/train/hybrid_test.cc runs the same layers on 2-rank groups inside pipeline stages).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/nn/model_gpt_tensor_parallel.h"
#include "dtrain/nn/model_mlp_tensor_parallel.h"
#include "dtrain/nn/transformer_block.h"
#include "model_inputs.h"

namespace dtrain::nn {
namespace {

using tensor::Shape;
using tensor::Tensor;

// A group of one rank: every collective is the identity; counts the calls.
class SoloGroup final : public GroupComm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void allreduce_sum(double* /*values*/, std::int64_t /*count*/) override { ++calls; }
  void allreduce_sum(float* /*values*/, std::int64_t /*count*/) override { ++calls; }
  void allgather(const float* mine, float* all, std::int64_t count) override {
    ++calls;
    std::copy(mine, mine + count, all);
  }
  void exchange(int /*peer*/, const float* /*send*/, std::int64_t /*send_count*/, float* /*recv*/,
                std::int64_t /*recv_count*/) override {
    ADD_FAILURE() << "no exchange in a tensor split";
  }
  int calls = 0;
};

TensorParallelModel make(const std::string& name, GroupComm& group) {
  ModelSpec spec;
  spec.name = name;
  if (name == "mlp") {
    spec.input = {1, 6, 6};
    spec.hidden = {12, 8};
    spec.num_classes = 4;
    spec.activation = "gelu";
    spec.dropout = 0.25f;
    return build_mlp_tensor_parallel(spec, group);
  }
  spec.vocab = 11;
  spec.block = 6;
  spec.d_model = 8;
  spec.heads = 2;
  spec.layers = 2;
  TensorParallelModel split = build_gpt_tensor_parallel(spec, group);
  return split;
}

// The split models are built without values (they come from the unsplit model): random ones.
void fill(Model& model) {
  Rng rng(3, 1);
  ParamStore& store = model.store();
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] = 0.3f * rng.normal();
}

using testing::grads_of;

class TensorParallelCloneTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TensorParallelCloneTest, TwoSlotsEqualOneAfterTheOther) {
  const std::string name = GetParam();
  SoloGroup group;
  TensorParallelModel reference = make(name, group);
  fill(*reference.model);
  Model& ref = *reference.model;
  const Tensor x0 = testing::model_input(ref, name, 3, 1);
  const Tensor x1 = testing::model_input(ref, name, 2, 2);
  const Tensor dy0 = testing::random_normal(ref.output_shape(3), 3);
  const Tensor dy1 = testing::random_normal(ref.output_shape(2), 4);
  ref.store().zero_grads();
  const Tensor y0 = ref.forward(x0, ForwardContext{Mode::kTrain, 5, 10, 0}).clone();
  ref.backward(dy0);
  const Tensor y1 = ref.forward(x1, ForwardContext{Mode::kTrain, 5, 11, 0}).clone();
  ref.backward(dy1);
  const int reference_calls = group.calls;

  SoloGroup slots_group;
  TensorParallelModel split = make(name, slots_group);
  fill(*split.model);
  Model& model = *split.model;
  model.reserve_slots(2);  // clones every layer: threw for the split layers before
  ASSERT_EQ(model.slots(), 2u);
  const int build_calls = slots_group.calls;
  model.store().zero_grads();
  const Tensor& out0 = model.forward(x0, ForwardContext{Mode::kTrain, 5, 10, 0});
  const Tensor& out1 = model.forward(x1, ForwardContext{Mode::kTrain, 5, 11, 1});
  ASSERT_EQ(out0.numel(), y0.numel());
  ASSERT_EQ(out1.numel(), y1.numel());
  for (std::int64_t i = 0; i < y0.numel(); ++i) ASSERT_EQ(out0.data()[i], y0.data()[i]);
  for (std::int64_t i = 0; i < y1.numel(); ++i) ASSERT_EQ(out1.data()[i], y1.data()[i]);
  const LayerRange all{0, model.layers().size()};
  model.backward_range(dy0, all, 0, false);
  model.backward_range(dy1, all, 1, false);
  EXPECT_EQ(grads_of(model), grads_of(ref));
  // The replicas talk over the same group: the same collectives as the one-slot run.
  EXPECT_EQ(slots_group.calls - build_calls, reference_calls);
}

INSTANTIATE_TEST_SUITE_P(SplitModels, TensorParallelCloneTest, ::testing::Values("mlp", "gpt"));

TEST(TensorParallelClone, SplitBlockCloneKeepsItsSplit) {
  SoloGroup group;
  TensorParallelModel split = make("gpt", group);
  const Layer& block = *split.model->layers()[1];
  const std::unique_ptr<Layer> copy = block.clone();
  EXPECT_EQ(copy->name(), block.name());
  EXPECT_EQ(copy->describe(), block.describe());
  EXPECT_NE(dynamic_cast<TransformerBlock*>(copy.get()), nullptr);
}

}  // namespace
}  // namespace dtrain::nn
