// Embedding: token + position rows, repeated tokens accumulating their gradients, finite
// differences of the tables, ids that are not tokens, shapes.
#include "dtrain/nn/embedding.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using ::testing::HasSubstr;
using testing::random_tensor;

TEST(EmbeddingTest, DeclaresTwoDecayingTablesDrawnFromNormal) {
  Embedding embed("embed", 11, 6, 4);
  ParamStore store;
  bind_single_layer(embed, store);
  ASSERT_EQ(store.param_entries().size(), 2u);
  EXPECT_EQ(store.param_entries()[0].name, "embed.token_weight");
  EXPECT_EQ(store.param_entries()[0].shape, (tensor::Shape{11, 4}));
  EXPECT_TRUE(store.param_entries()[0].weight_decay);
  EXPECT_EQ(store.param_entries()[1].name, "embed.position_weight");
  EXPECT_EQ(store.param_entries()[1].shape, (tensor::Shape{6, 4}));
  EXPECT_TRUE(store.param_entries()[1].weight_decay);
  EXPECT_EQ(embed.token_weight_name(), "embed.token_weight");
  // N(0, 0.02^2): 68 draws, all small, not all zero.
  double sq = 0.0;
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    EXPECT_LT(std::fabs(store.params()[i]), 0.02f * 6);
    sq += static_cast<double>(store.params()[i]) * store.params()[i];
  }
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(store.num_params())), 0.02, 0.008);
}

TEST(EmbeddingTest, ForwardAddsTheTokenAndPositionRows) {
  Embedding embed("embed", 5, 4, 3);
  ParamStore store;
  bind_single_layer(embed, store);
  // x (2, 3): a window shorter than the block.
  const tensor::Tensor x = tensor::Tensor::from({2, 3}, {4, 0, 4, 1, 1, 2});
  const tensor::Tensor& y = embed.forward(x, {});
  ASSERT_EQ(y.shape(), (tensor::Shape{2, 3, 3}));
  const float* tok = embed.token_weight().data();
  const float* pos = embed.position_weight().data();
  for (std::int64_t b = 0; b < 2; ++b) {
    for (std::int64_t t = 0; t < 3; ++t) {
      const auto id = static_cast<std::int64_t>(x.data()[b * 3 + t]);
      for (std::int64_t c = 0; c < 3; ++c) {
        EXPECT_EQ(y.data()[(b * 3 + t) * 3 + c], tok[id * 3 + c] + pos[t * 3 + c]);
      }
    }
  }
}

// L = sum(r * y) is linear in the tables: dL/dtoken[v] = sum of r over the positions holding v,
// dL/dposition[t] = sum of r over the batch at t. Checked against finite differences too.
TEST(EmbeddingTest, BackwardAccumulatesRepeatedTokensAndMatchesFiniteDifferences) {
  Embedding embed("embed", 6, 5, 4);
  ParamStore store;
  bind_single_layer(embed, store);
  const tensor::Tensor x = tensor::Tensor::from({2, 5}, {3, 3, 0, 5, 3, 1, 3, 2, 2, 0});
  const tensor::Tensor r = random_tensor({2, 5, 4}, 9);
  store.zero_grads();
  embed.forward(x, {});
  const tensor::Tensor& none = embed.backward(r, /*need_input_grad=*/false);
  EXPECT_EQ(none.numel(), 0);
  const float* dtok = store.grads();
  const float* dpos = store.grads() + 6 * 4;
  for (std::int64_t c = 0; c < 4; ++c) {
    // Token 3 sits at (0, 0), (0, 1), (0, 4), (1, 1).
    const double token3 = r.at({0, 0, c}) + r.at({0, 1, c}) + r.at({0, 4, c}) + r.at({1, 1, c});
    EXPECT_NEAR(dtok[3 * 4 + c], token3, 1e-6);
    EXPECT_EQ(dtok[4 * 4 + c], 0.0f);  // token 4 never appears
    EXPECT_NEAR(dpos[2 * 4 + c], r.at({0, 2, c}) + r.at({1, 2, c}), 1e-6);
  }
  const std::vector<float> analytic(store.grads(), store.grads() + store.num_params());
  const double h = 1e-2;
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    const float saved = store.params()[i];
    store.params()[i] = static_cast<float>(saved + h);
    const double plus = testing::weighted_sum(embed.forward(x, {}), r);
    store.params()[i] = static_cast<float>(saved - h);
    const double minus = testing::weighted_sum(embed.forward(x, {}), r);
    store.params()[i] = saved;
    EXPECT_NEAR(analytic[static_cast<std::size_t>(i)], (plus - minus) / (2 * h), 1e-4) << i;
  }
  // Ids are not differentiable: dx is zero.
  embed.forward(x, {});
  for (float v : embed.backward(r, true).to_vector()) EXPECT_EQ(v, 0.0f);
}

TEST(EmbeddingTest, AnIdThatIsNotATokenIsADataErrorNamingWhere) {
  Embedding embed("embed", 256, 8, 4);
  ParamStore store;
  bind_single_layer(embed, store);
  for (const float bad : {256.0f, -1.0f, 3.5f, NAN}) {
    tensor::Tensor x = tensor::Tensor::zeros({2, 4});
    x.data()[6] = bad;  // sample 1, position 2
    try {
      embed.forward(x, {});
      FAIL() << "expected DataError for " << bad;
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr("layer embed: token id"));
      EXPECT_THAT(e.what(), HasSubstr("at sample 1, position 2 is not an integer in [0, 256)"));
    }
  }
  tensor::Tensor x = tensor::Tensor::zeros({1, 2});
  x.data()[1] = 300.0f;
  try {
    embed.forward(x, {});
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("token id 300 at sample 0, position 1"));
  }
}

TEST(EmbeddingTest, WindowsLongerThanTheBlockAreShapeErrors) {
  Embedding embed("embed", 256, 8, 4);
  EXPECT_EQ(embed.output_shape({3, 8}), (tensor::Shape{3, 8, 4}));
  EXPECT_EQ(embed.output_shape({3, 1}), (tensor::Shape{3, 1, 4}));
  try {
    embed.output_shape({3, 9});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("layer embed (Embedding(256 tokens + 8 positions -> 4)) expects "
                          "input [B, T] of token ids with 1 <= T <= 8, got [B, 9]"));
  }
  EXPECT_THROW(embed.output_shape({3, 8, 1}), ShapeError);
  EXPECT_THROW(Embedding("embed", 0, 8, 4), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
