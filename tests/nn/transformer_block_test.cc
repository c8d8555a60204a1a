// TransformerBlock: the forward pass against the same computation spelled out with its sub-layers,
// finite differences, parameter names and count, shape errors.
#include "dtrain/nn/transformer_block.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using ::testing::HasSubstr;
using testing::random_tensor;

TEST(TransformerBlockTest, ParametersInTorchOrderWithDecayOnWeightsOnly) {
  const std::int64_t d = 8;
  TransformerBlock block("block1", d, 2, 16);
  ParamStore store;
  bind_single_layer(block, store);
  std::vector<std::string> names;
  for (const auto& e : store.param_entries()) {
    names.push_back(e.name);
    EXPECT_EQ(e.weight_decay, e.shape.size() == 2) << e.name;
  }
  EXPECT_THAT(names, ::testing::ElementsAre(
                         "block1.ln1.weight", "block1.ln1.bias", "block1.attn.qkv.weight",
                         "block1.attn.qkv.bias", "block1.attn.proj.weight", "block1.attn.proj.bias",
                         "block1.ln2.weight", "block1.ln2.bias", "block1.fc.weight",
                         "block1.fc.bias", "block1.out.weight", "block1.out.bias"));
  EXPECT_EQ(store.num_params(), 12 * d * d + 13 * d);
  std::vector<std::string> subs;
  for (Layer* l : block.sublayers()) subs.push_back(l->name());
  EXPECT_THAT(subs, ::testing::ElementsAre("block1.ln1", "block1.attn", "block1.ln2", "block1.fc",
                                           "block1.gelu", "block1.out"));
}

// y = h + out(gelu(fc(ln2(h)))), h = x + attn(ln1(x)), through the sub-layers one by one.
TEST(TransformerBlockTest, ForwardIsTheTwoResidualBranches) {
  TransformerBlock block("b", 8, 2, 16);
  ParamStore store;
  bind_single_layer(block, store, 3);
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] *= 10.0f;
  const tensor::Tensor x = random_tensor({2, 5, 8}, 6);
  const std::vector<float> y = block.forward(x, {}).to_vector();
  const std::vector<Layer*> s = block.sublayers();
  const ForwardContext ctx;
  const tensor::Tensor a = s[1]->forward(s[0]->forward(x, ctx), ctx).clone();
  tensor::Tensor h = x.clone();
  for (std::int64_t i = 0; i < h.numel(); ++i) h.data()[i] += a.data()[i];
  const tensor::Tensor m =
      s[5]->forward(s[4]->forward(s[3]->forward(s[2]->forward(h, ctx), ctx), ctx), ctx).clone();
  // Up to rounding: the block folds each sum into its branch's last product (Linear::forward_onto).
  for (std::int64_t i = 0; i < h.numel(); ++i) {
    const float expected = h.data()[i] + m.data()[i];
    EXPECT_NEAR(y[static_cast<std::size_t>(i)], expected, 1e-5 * (1.0 + std::fabs(expected))) << i;
  }
}

TEST(TransformerBlockTest, FiniteDifferenceGradients) {
  TransformerBlock block("b", 8, 2, 8);
  ParamStore store;
  bind_single_layer(block, store, 4);
  // Weights of std 0.06 and LayerNorm gains of 3: far from linear, still smooth at h = 1e-2.
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] *= 3.0f;
  testing::GradCheckOptions options;
  options.max_coordinates = 24;
  check_layer_gradients(block, store, random_tensor({2, 5, 8}, 7), options);
}

TEST(TransformerBlockTest, ShapeErrorsNameTheSublayer) {
  TransformerBlock block("block3", 16, 4, 8);
  try {
    block.output_shape({2, 4, 32});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer block3.ln1 (LayerNorm(16))"));
    EXPECT_THAT(e.what(), HasSubstr("got [B, 4, 32]"));
  }
  try {
    block.output_shape({2, 12, 16});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer block3.attn"));
    EXPECT_THAT(e.what(), HasSubstr("got [B, 12, 16]"));
  }
}

}  // namespace
}  // namespace dtrain::nn
