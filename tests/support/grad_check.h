// Finite-difference gradient checks for nn layers and losses (tests only).
//
// A layer y = f(x; theta) is checked through the scalar L = sum(r * y) with a fixed random r, so
// dL/dy = r. backward(r) must give dL/dx and dL/dtheta; each is compared with the central
// difference (L(v + h) - L(v - h)) / 2h, evaluated in f32 forward passes but summed in double.
//
// Tolerance: |analytic - numeric| <= atol + rtol * max(|analytic|, |numeric|). With h = 1e-2 and
// f32 arithmetic the truncation error of smooth functions is O(h^2) and round-off is about
// 1e-7 * |L| / h, so atol 2e-3, rtol 2e-2 hold for well-scaled inputs.
//
// Kinks (ReLU and friends at 0, max-pool ties) are handled on purpose, not by loose tolerances:
// inputs are drawn away from the kink (`away_from` and `min_gap`), and the value at the kink itself
// is tested separately by each layer's own test.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/model.h"
#include "dtrain/nn/param_store.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::testing {

struct GradCheckOptions {
  double step = 1e-2;
  double atol = 2e-3;
  double rtol = 2e-2;
  nn::Mode mode = nn::Mode::kTrain;
  // Check at most this many coordinates of each tensor (spread evenly), to keep tests fast.
  std::int64_t max_coordinates = 64;
};

// Uniform random values in [-scale, scale], nudged so that none is within min_gap of any point in
// away_from (e.g. {0.0} for ReLU).
inline tensor::Tensor random_tensor(const tensor::Shape& shape, std::uint64_t seed,
                                    float scale = 1.0f, std::vector<float> away_from = {},
                                    float min_gap = 0.05f) {
  tensor::Tensor t = tensor::Tensor::empty(shape);
  Rng rng(seed, 77);
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    float v = (2.0f * rng.uniform() - 1.0f) * scale;
    for (float kink : away_from) {
      if (std::fabs(v - kink) < min_gap) v = kink + (v >= kink ? min_gap : -min_gap) * 2.0f;
    }
    t.data()[i] = v;
  }
  return t;
}

inline double weighted_sum(const tensor::Tensor& y, const tensor::Tensor& r) {
  double total = 0.0;
  const float* yd = y.data();
  const float* rd = r.data();
  for (std::int64_t i = 0; i < y.numel(); ++i) total += static_cast<double>(yd[i]) * rd[i];
  return total;
}

inline void expect_close(const std::string& what, std::int64_t index, double analytic,
                         double numeric, const GradCheckOptions& options) {
  const double bound =
      options.atol + options.rtol * std::max(std::fabs(analytic), std::fabs(numeric));
  EXPECT_LE(std::fabs(analytic - numeric), bound)
      << what << "[" << index << "]: analytic " << analytic << " vs numeric " << numeric;
}

// Checks dL/dx and dL/dtheta of `layer` at input x. The layer must be bound to `store`, whose
// parameters are already initialised; the store's gradients are overwritten.
inline void check_layer_gradients(nn::Layer& layer, nn::ParamStore& store, tensor::Tensor x,
                                  const GradCheckOptions& options = {}, std::uint64_t seed = 1) {
  nn::ForwardContext ctx;
  ctx.mode = options.mode;
  ctx.seed = 1234;
  const tensor::Tensor y0 = layer.forward(x, ctx).clone();
  const tensor::Tensor r = random_tensor(y0.shape(), seed + 1000);

  // Analytic gradients (dx copied before the layer's buffers change again).
  store.zero_grads();
  layer.forward(x, ctx);
  const tensor::Tensor dx = layer.backward(r, /*need_input_grad=*/true).clone();
  const std::vector<float> dtheta(store.grads(), store.grads() + store.num_params());
  ASSERT_EQ(dx.shape(), x.shape()) << layer.name() << ": dx shape differs from x shape";

  auto loss = [&] { return weighted_sum(layer.forward(x, ctx), r); };
  auto check_values = [&](const std::string& what, float* values, std::int64_t n,
                          const float* analytic) {
    const std::int64_t stride = std::max<std::int64_t>(1, n / options.max_coordinates);
    for (std::int64_t i = 0; i < n; i += stride) {
      const float saved = values[i];
      values[i] = static_cast<float>(saved + options.step);
      const double plus = loss();
      values[i] = static_cast<float>(saved - options.step);
      const double minus = loss();
      values[i] = saved;
      expect_close(layer.name() + " " + what, i, analytic[i], (plus - minus) / (2.0 * options.step),
                   options);
    }
  };
  check_values("dx", x.data(), x.numel(), dx.data());
  check_values("dtheta", store.params(), store.num_params(), dtheta.data());
}

// Whole-model check that backward is the gradient of forward: one step of length 1e-4 against the
// gradient of L = sum(r * model(x)) lowers L by the first-order amount lr * |g|^2 = 1e-4 * |g|,
// within 30% for curvature and f32 rounding.
inline void expect_first_order_descent(nn::Model& model, const tensor::Tensor& x,
                                       const tensor::Tensor& r) {
  const double before = weighted_sum(model.forward(x, nn::ForwardContext{}), r);
  nn::ParamStore& store = model.store();
  store.zero_grads();
  model.backward(r);
  double norm_sq = 0.0;
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    norm_sq += static_cast<double>(store.grads()[i]) * store.grads()[i];
  }
  ASSERT_GT(norm_sq, 0.0);
  const double lr = 1e-4 / std::sqrt(norm_sq);
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    store.params()[i] -= static_cast<float>(lr * store.grads()[i]);
  }
  const double after = weighted_sum(model.forward(x, nn::ForwardContext{}), r);
  EXPECT_NEAR(before - after, 1e-4 * std::sqrt(norm_sq), 0.3e-4 * std::sqrt(norm_sq));
}

// Builds a store for a single layer: declare, finalize, bind, init with `seed`.
inline void bind_single_layer(nn::Layer& layer, nn::ParamStore& store, std::uint64_t seed = 7) {
  layer.declare(store);
  store.finalize();
  layer.bind(store);
  Rng rng(seed, 3);
  layer.init(rng);
}

}  // namespace dtrain::testing
