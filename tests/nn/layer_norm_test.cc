// LayerNorm: the closed form in double, any leading dimensions, finite differences, the parameter
// flags, shape errors.
#include "dtrain/nn/layer_norm.h"

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

// Non-trivial weight and bias, so that both enter the checks.
void set_affine(ParamStore& store, std::int64_t d) {
  for (std::int64_t c = 0; c < d; ++c) {
    store.params()[c] = 0.5f + 0.1f * static_cast<float>(c);        // weight
    store.params()[d + c] = -0.2f + 0.05f * static_cast<float>(c);  // bias
  }
}

TEST(LayerNormTest, DeclaresWeightOneAndBiasZeroWithoutDecay) {
  LayerNorm ln("ln", 6);
  ParamStore store;
  bind_single_layer(ln, store);
  ASSERT_EQ(store.param_entries().size(), 2u);
  EXPECT_EQ(store.param_entries()[0].name, "ln.weight");
  EXPECT_EQ(store.param_entries()[1].name, "ln.bias");
  EXPECT_FALSE(store.param_entries()[0].weight_decay);
  EXPECT_FALSE(store.param_entries()[1].weight_decay);
  for (float w : ln.weight().to_vector()) EXPECT_EQ(w, 1.0f);
  for (float b : ln.bias().to_vector()) EXPECT_EQ(b, 0.0f);
  EXPECT_EQ(ln.describe(), "LayerNorm(6)");
}

TEST(LayerNormTest, MatchesTheClosedFormOverTheLastDimension) {
  const std::int64_t d = 37;  // not a multiple of the 16 lanes
  LayerNorm ln("ln", d);
  ParamStore store;
  bind_single_layer(ln, store);
  set_affine(store, d);
  // (2, 3, d): six rows, one of them offset far from 0 (the mean must be subtracted exactly).
  tensor::Tensor x = random_tensor({2, 3, d}, 4, 2.0f);
  for (std::int64_t c = 0; c < d; ++c) x.data()[4 * d + c] += 100.0f;
  const tensor::Tensor y = ln.forward(x, {}).clone();
  ASSERT_EQ(y.shape(), x.shape());
  for (std::int64_t r = 0; r < 6; ++r) {
    const float* xr = x.data() + r * d;
    double mean = 0.0;
    for (std::int64_t c = 0; c < d; ++c) mean += xr[c];
    mean /= static_cast<double>(d);
    double var = 0.0;
    for (std::int64_t c = 0; c < d; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(d);
    for (std::int64_t c = 0; c < d; ++c) {
      const double expected =
          (xr[c] - mean) / std::sqrt(var + 1e-5) * store.params()[c] + store.params()[d + c];
      EXPECT_NEAR(y.data()[r * d + c], expected, 2e-5) << "row " << r << " column " << c;
    }
  }
}

TEST(LayerNormTest, FiniteDifferenceGradients) {
  for (const tensor::Shape& shape : {tensor::Shape{3, 5}, tensor::Shape{2, 3, 19}}) {
    SCOPED_TRACE(tensor::shape_str(shape));
    LayerNorm ln("ln", shape.back());
    ParamStore store;
    bind_single_layer(ln, store);
    set_affine(store, shape.back());
    check_layer_gradients(ln, store, random_tensor(shape, 2));
  }
}

TEST(LayerNormTest, TwoThreadsGiveTheSameResults) {
  const std::int64_t d = 64;
  LayerNorm ln("ln", d);
  ParamStore store;
  bind_single_layer(ln, store);
  set_affine(store, d);
  const tensor::Tensor x = random_tensor({4, 100, d}, 3);
  const tensor::Tensor dy = random_tensor({4, 100, d}, 5);
  auto run = [&] {
    store.zero_grads();
    std::vector<float> out = ln.forward(x, {}).to_vector();
    const std::vector<float> dx = ln.backward(dy, true).to_vector();
    out.insert(out.end(), dx.begin(), dx.end());
    out.insert(out.end(), store.grads(), store.grads() + store.num_params());
    return out;
  };
  const std::vector<float> one = run();
  ScopedComputePool pool(2);
  EXPECT_EQ(run(), one);
}

// backward_plus(dy, r) is backward(dy) + r (the transformer block's fused residual sum; up to
// rounding: the compiler may fuse the sum into a multiply-add), with the same parameter gradients;
// those match sums in double over 150 rows (chunks of 64, the last one partial).
TEST(LayerNormTest, BackwardPlusAddsTheResidualInTheSamePass) {
  const std::int64_t d = 48;
  LayerNorm ln("ln", d);
  ParamStore store;
  bind_single_layer(ln, store);
  set_affine(store, d);
  const tensor::Tensor x = random_tensor({150, d}, 7, 2.0f);
  const tensor::Tensor dy = random_tensor({150, d}, 8);
  const tensor::Tensor residual = random_tensor({150, d}, 9);
  ln.forward(x, {});
  store.zero_grads();
  const std::vector<float> dx = ln.backward(dy, true).to_vector();
  const std::vector<float> grads(store.grads(), store.grads() + store.num_params());
  store.zero_grads();
  const std::vector<float> dx_plus = ln.backward_plus(dy, residual).to_vector();
  const std::vector<float> r = residual.to_vector();
  for (std::size_t i = 0; i < dx.size(); ++i) {
    ASSERT_NEAR(dx_plus[i], r[i] + dx[i], 1e-6 * (1.0 + std::fabs(r[i]))) << i;
  }
  EXPECT_EQ(std::vector<float>(store.grads(), store.grads() + store.num_params()), grads);
  for (std::int64_t c = 0; c < d; ++c) {
    double dw = 0.0, db = 0.0;
    for (std::int64_t row = 0; row < 150; ++row) {
      double mean = 0.0, var = 0.0;
      for (std::int64_t j = 0; j < d; ++j) mean += x.at({row, j});
      mean /= static_cast<double>(d);
      for (std::int64_t j = 0; j < d; ++j) var += std::pow(x.at({row, j}) - mean, 2);
      var /= static_cast<double>(d);
      dw += dy.at({row, c}) * (x.at({row, c}) - mean) / std::sqrt(var + 1e-5);
      db += dy.at({row, c});
    }
    EXPECT_NEAR(grads[static_cast<std::size_t>(c)], dw, 1e-4) << c;
    EXPECT_NEAR(grads[static_cast<std::size_t>(d + c)], db, 1e-4) << c;
  }
  EXPECT_THAT(
      [&] {
        ln.backward_plus(dy, random_tensor({150, d + 1}, 1));
      },
      ::testing::ThrowsMessage<InternalError>(HasSubstr("residual gradient shape")));
}

TEST(LayerNormTest, WrongLastDimensionNamesTheLayerAndBothShapes) {
  LayerNorm ln("block1.ln1", 128);
  try {
    ln.output_shape({4, 16, 64});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("layer block1.ln1 (LayerNorm(128)) expects input [B, ..., 128]"));
    EXPECT_THAT(e.what(), HasSubstr("got [B, 16, 64]"));
  }
  EXPECT_THROW(ln.output_shape({128}), ShapeError);
  EXPECT_THROW(LayerNorm("ln", 0), ConfigError);
}

}  // namespace
}  // namespace dtrain::nn
