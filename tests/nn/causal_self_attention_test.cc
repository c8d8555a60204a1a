// CausalSelfAttention: the fast core (GEMMs in place, causal tiles, split over threads) against its
// naive twin in plain loops, forward and backward; causality; finite differences of the whole
// layer; sub-layers and shape errors.
#include "dtrain/nn/causal_self_attention.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using ::testing::HasSubstr;
using testing::random_tensor;

void expect_all_near(const std::vector<float>& fast, const std::vector<float>& naive, double tol,
                     const char* what) {
  ASSERT_EQ(fast.size(), naive.size());
  int reported = 0;
  for (std::size_t i = 0; i < fast.size(); ++i) {
    if (std::fabs(fast[i] - naive[i]) > tol && reported++ < 5) {
      ADD_FAILURE() << what << "[" << i << "]: fast " << fast[i] << " vs naive " << naive[i];
    }
  }
}

// The core against the twin for one shape, tile and thread count.
void expect_core_matches_naive(const AttentionDims& dims, std::int64_t tile, int threads) {
  SCOPED_TRACE(::testing::Message()
               << "B=" << dims.batch << " T=" << dims.length << " H=" << dims.heads
               << " d=" << dims.dim << " tile=" << tile << " threads=" << threads);
  ScopedComputePool pool(threads);
  const std::int64_t rows = dims.batch * dims.length;
  // Scale 2: logits of a few units, so that the softmax is far from uniform.
  const tensor::Tensor qkv = random_tensor({rows, 3 * dims.dim}, 21, 2.0f);
  const tensor::Tensor dy = random_tensor({rows, dims.dim}, 22);
  tensor::Tensor probs = tensor::Tensor::empty({dims.batch, dims.heads, dims.length, dims.length});
  tensor::Tensor y = tensor::Tensor::empty({rows, dims.dim});
  tensor::Tensor dqkv = tensor::Tensor::empty({rows, 3 * dims.dim});
  tensor::Tensor scratch;
  causal_attention_forward(dims, tile, qkv.data(), probs.data(), y.data());
  causal_attention_backward(dims, tile, qkv.data(), probs.data(), dy.data(), scratch, dqkv.data());

  std::vector<float> y_naive(static_cast<std::size_t>(y.numel()));
  std::vector<float> dqkv_naive(static_cast<std::size_t>(dqkv.numel()));
  causal_attention_naive(dims, qkv.data(), y_naive.data());
  causal_attention_naive_backward(dims, qkv.data(), dy.data(), dqkv_naive.data());
  expect_all_near(y.to_vector(), y_naive, 1e-5, "y");
  expect_all_near(dqkv.to_vector(), dqkv_naive, 1e-5, "dqkv");
}

TEST(CausalAttentionCoreTest, FastPathEqualsTheNaiveTwin) {
  // T a multiple of the tile, not a multiple, shorter than it; one head and several; 1 and 2
  // threads (the (b, h) pairs split over the pool).
  expect_core_matches_naive({2, 16, 2, 8}, 4, 1);
  expect_core_matches_naive({2, 16, 2, 8}, 5, 1);
  expect_core_matches_naive({1, 7, 1, 4}, 32, 1);
  expect_core_matches_naive({3, 13, 4, 12}, 3, 2);
  expect_core_matches_naive({2, 40, 4, 32}, 32, 2);
  expect_core_matches_naive({2, 9, 3, 6}, 1, 1);
}

// Head widths 16, 32, 48 and 64 take the AVX-512 kernel for dV and dK (8 rows at a time, the
// rest one by one: tiles of 13, 7 and 5 leave 5, 7 and 5 rows), 24 its gemm_serial fallback.
TEST(CausalAttentionCoreTest, KeyTileGradientKernelEqualsTheNaiveTwin) {
  expect_core_matches_naive({2, 48, 2, 64}, 32, 1);
  expect_core_matches_naive({1, 37, 1, 16}, 13, 1);
  expect_core_matches_naive({1, 20, 2, 96}, 7, 2);
  expect_core_matches_naive({1, 23, 2, 128}, 5, 1);
  expect_core_matches_naive({1, 17, 1, 24}, 8, 1);
}

TEST(CausalAttentionCoreTest, TileSizeDoesNotChangeTheResult) {
  const AttentionDims dims{2, 24, 2, 8};
  const tensor::Tensor qkv = random_tensor({48, 24}, 3, 2.0f);
  std::vector<std::vector<float>> outputs;
  for (std::int64_t tile : {1, 4, 7, 24, 100}) {
    tensor::Tensor probs = tensor::Tensor::empty({2, 2, 24, 24});
    tensor::Tensor y = tensor::Tensor::empty({48, 8});
    causal_attention_forward(dims, tile, qkv.data(), probs.data(), y.data());
    outputs.push_back(y.to_vector());
  }
  for (std::size_t i = 1; i < outputs.size(); ++i)
    expect_all_near(outputs[i], outputs[0], 1e-6, "y");
}

// Rows of P sum to 1 and are 0 above the diagonal (within a row's tile, where they are written).
TEST(CausalAttentionCoreTest, ProbabilitiesAreCausalAndNormalized) {
  const AttentionDims dims{1, 8, 1, 4};
  const tensor::Tensor qkv = random_tensor({8, 12}, 5, 3.0f);
  tensor::Tensor probs = tensor::Tensor::zeros({1, 1, 8, 8});
  tensor::Tensor y = tensor::Tensor::empty({8, 4});
  causal_attention_forward(dims, /*tile=*/8, qkv.data(), probs.data(), y.data());
  for (std::int64_t i = 0; i < 8; ++i) {
    double sum = 0.0;
    for (std::int64_t j = 0; j < 8; ++j) {
      if (j > i) {
        EXPECT_EQ(probs.at({0, 0, i, j}), 0.0f) << i << "," << j;
      }
      sum += probs.at({0, 0, i, j});
    }
    EXPECT_NEAR(sum, 1.0, 1e-6) << "row " << i;
  }
  // Row 0 attends only to key 0: y[0] = v[0].
  for (std::int64_t c = 0; c < 4; ++c) EXPECT_NEAR(y.at({0, c}), qkv.at({0, 8 + c}), 1e-6);
}

TEST(CausalSelfAttentionTest, SublayersNamesAndParameters) {
  CausalSelfAttention attn("block1.attn", 8, 2, 16);
  ParamStore store;
  bind_single_layer(attn, store);
  std::vector<std::string> names;
  for (const auto& e : store.param_entries()) names.push_back(e.name);
  EXPECT_THAT(names, ::testing::ElementsAre("block1.attn.qkv.weight", "block1.attn.qkv.bias",
                                            "block1.attn.proj.weight", "block1.attn.proj.bias"));
  EXPECT_EQ(store.num_params(), 8 * 24 + 24 + 8 * 8 + 8);
  ASSERT_EQ(attn.sublayers().size(), 2u);
  EXPECT_EQ(attn.sublayers()[0]->name(), "block1.attn.qkv");
  EXPECT_EQ(attn.describe(), "CausalSelfAttention(8, 2 heads, block 16)");
}

TEST(CausalSelfAttentionTest, FiniteDifferenceGradients) {
  for (std::int64_t tile : {3, 32}) {
    SCOPED_TRACE(tile);
    CausalSelfAttention attn("attn", 8, 2, 16);
    attn.set_tile(tile);
    ParamStore store;
    bind_single_layer(attn, store, 5);
    // Larger weights than the 0.02 init, so that attention is not nearly uniform.
    for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] *= 20.0f;
    check_layer_gradients(attn, store, random_tensor({2, 6, 8}, 8));
  }
}

// Changing token t + 1 (and everything after it) leaves the outputs at positions <= t unchanged,
// bit for bit; the output at t + 1 does change.
TEST(CausalSelfAttentionTest, OutputsDoNotSeeLaterPositions) {
  const std::int64_t t_len = 12;
  const std::int64_t d = 8;
  CausalSelfAttention attn("attn", d, 2, t_len);
  attn.set_tile(4);
  ParamStore store;
  bind_single_layer(attn, store, 2);
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] *= 20.0f;
  const tensor::Tensor x = random_tensor({2, t_len, d}, 4);
  const std::vector<float> y0 = attn.forward(x, {}).to_vector();
  for (std::int64_t t : {0, 3, 4, 10}) {
    tensor::Tensor changed = x.clone();
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t s = t + 1; s < t_len; ++s) {
        for (std::int64_t c = 0; c < d; ++c) changed.at({b, s, c}) += 0.5f;
      }
    }
    const std::vector<float> y1 = attn.forward(changed, {}).to_vector();
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t s = 0; s < t_len; ++s) {
        for (std::int64_t c = 0; c < d; ++c) {
          const auto i = static_cast<std::size_t>((b * t_len + s) * d + c);
          if (s <= t) {
            EXPECT_EQ(y1[i], y0[i]) << "t=" << t << " b=" << b << " s=" << s << " c=" << c;
          }
        }
      }
      const auto next = static_cast<std::size_t>((b * t_len + t + 1) * d);
      EXPECT_NE(y1[next], y0[next]) << "t=" << t;
    }
  }
}

TEST(CausalSelfAttentionTest, ShapeErrorsNameTheLayerAndBothShapes) {
  CausalSelfAttention attn("block2.attn", 16, 4, 8);
  EXPECT_EQ(attn.output_shape({2, 5, 16}), (tensor::Shape{2, 5, 16}));
  try {
    attn.output_shape({2, 9, 16});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("layer block2.attn (CausalSelfAttention(16, 4 heads, block 8)) "
                                    "expects input [B, T, 16] with 1 <= T <= 8, got [B, 9, 16]"));
  }
  EXPECT_THROW(attn.output_shape({2, 5, 12}), ShapeError);
  EXPECT_THROW(attn.output_shape({10, 16}), ShapeError);
  EXPECT_THROW(CausalSelfAttention("a", 10, 4, 8), ConfigError);  // 4 does not divide 10
}

}  // namespace
}  // namespace dtrain::nn
