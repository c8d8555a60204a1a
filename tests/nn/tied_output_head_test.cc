// TiedOutputHead: it shares the embedding's tensor (one store entry), the products against plain
// loops, both layers' gradient contributions reaching the one gradient range, and binding errors.
#include "dtrain/nn/tied_output_head.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/embedding.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;
using testing::random_tensor;

struct TiedPair {
  TiedPair() : embed("embed", 7, 4, 3), head("head", "embed.token_weight", 3, 7) {
    embed.declare(store);
    head.declare(store);
    store.finalize();
    embed.bind(store);
    head.bind(store);
    Rng rng(5, 1);
    embed.init(rng);
  }
  Embedding embed;
  TiedOutputHead head;
  ParamStore store;
};

TEST(TiedOutputHeadTest, SharesTheEmbeddingsTensorWithoutDeclaringOne) {
  TiedPair pair;
  ASSERT_EQ(pair.store.param_entries().size(), 2u);  // token and position tables only
  EXPECT_EQ(pair.store.num_params(), 7 * 3 + 4 * 3);
  EXPECT_EQ(pair.head.weight().data(), pair.embed.token_weight().data());
  EXPECT_EQ(pair.head.describe(), "TiedOutputHead(3 -> 7, weight embed.token_weight)");
}

TEST(TiedOutputHeadTest, ProductsMatchPlainLoops) {
  TiedPair pair;
  const tensor::Tensor x = random_tensor({2, 3, 3}, 1);
  const tensor::Tensor dy = random_tensor({2, 3, 7}, 2);
  const tensor::Tensor y = pair.head.forward(x, {}).clone();
  ASSERT_EQ(y.shape(), (tensor::Shape{2, 3, 7}));
  pair.store.zero_grads();
  const tensor::Tensor dx = pair.head.backward(dy, true).clone();
  const float* w = pair.head.weight().data();
  const float* dw = pair.store.grads();  // the token table comes first
  for (std::int64_t n = 0; n < 6; ++n) {
    for (std::int64_t v = 0; v < 7; ++v) {
      double sum = 0.0;
      for (std::int64_t c = 0; c < 3; ++c) sum += double(x.data()[n * 3 + c]) * w[v * 3 + c];
      EXPECT_NEAR(y.data()[n * 7 + v], sum, 1e-6);
    }
    for (std::int64_t c = 0; c < 3; ++c) {
      double sum = 0.0;
      for (std::int64_t v = 0; v < 7; ++v) sum += double(dy.data()[n * 7 + v]) * w[v * 3 + c];
      EXPECT_NEAR(dx.data()[n * 3 + c], sum, 1e-6);
    }
  }
  for (std::int64_t v = 0; v < 7; ++v) {
    for (std::int64_t c = 0; c < 3; ++c) {
      double sum = 0.0;
      for (std::int64_t n = 0; n < 6; ++n)
        sum += double(dy.data()[n * 7 + v]) * x.data()[n * 3 + c];
      EXPECT_NEAR(dw[v * 3 + c], sum, 1e-6);
    }
  }
}

// embed -> head: L = sum(r * head(embed(ids))) depends on the token table twice; the gradient in
// the one range is the sum of both layers' contributions and matches finite differences.
TEST(TiedOutputHeadTest, BothContributionsReachTheOneGradient) {
  TiedPair pair;
  const tensor::Tensor ids = tensor::Tensor::from({2, 4}, {1, 6, 1, 0, 3, 3, 2, 6});
  const tensor::Tensor r = random_tensor({2, 4, 7}, 3);
  auto loss = [&] {
    return testing::weighted_sum(pair.head.forward(pair.embed.forward(ids, {}), {}), r);
  };
  pair.store.zero_grads();
  pair.head.forward(pair.embed.forward(ids, {}), {});
  const tensor::Tensor& dh = pair.head.backward(r, true);
  const std::vector<float> head_only(pair.store.grads(), pair.store.grads() + 21);
  pair.embed.backward(dh, false);
  const std::vector<float> both(pair.store.grads(), pair.store.grads() + pair.store.num_params());
  bool embedding_added = false;
  for (std::size_t i = 0; i < 21; ++i) embedding_added |= both[i] != head_only[i];
  EXPECT_TRUE(embedding_added);
  const double h = 1e-2;
  for (std::int64_t i = 0; i < pair.store.num_params(); ++i) {
    const float saved = pair.store.params()[i];
    pair.store.params()[i] = static_cast<float>(saved + h);
    const double plus = loss();
    pair.store.params()[i] = static_cast<float>(saved - h);
    const double minus = loss();
    pair.store.params()[i] = saved;
    EXPECT_NEAR(both[static_cast<std::size_t>(i)], (plus - minus) / (2 * h), 2e-4) << i;
  }
}

TEST(TiedOutputHeadTest, AMissingOrMisshapenTiedWeightIsAConfigError) {
  ParamStore store;
  store.add_param("embed.token_weight", {5, 3}, true);
  store.finalize();
  TiedOutputHead missing("head", "tok.weight", 3, 5);
  try {
    missing.bind(store);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer head: the tied weight 'tok.weight' is not a parameter"));
  }
  TiedOutputHead wrong("head", "embed.token_weight", 3, 7);
  try {
    wrong.bind(store);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("has shape [5, 3], the head needs [7, 3]"));
  }
  EXPECT_THROW(missing.output_shape({2, 4}), ShapeError);
}

}  // namespace
}  // namespace dtrain::nn
