#include "dtrain/nn/init.h"

#include <cmath>

#include "dtrain/base/error.h"

namespace dtrain::nn {

InitKind parse_init(std::string_view name) {
  if (name == "normal") return InitKind::kNormal;
  if (name == "xavier") return InitKind::kXavier;
  if (name == "he") return InitKind::kHe;
  if (name == "uniform") return InitKind::kUniform;
  throw ConfigError(fmt::format(
      "model.init: unknown weight initialisation '{}'; accepted: normal, xavier, he, uniform",
      name));
}

std::string_view init_name(InitKind kind) {
  switch (kind) {
    case InitKind::kNormal: return "normal";
    case InitKind::kXavier: return "xavier";
    case InitKind::kHe: return "he";
    case InitKind::kUniform: return "uniform";
  }
  throw InternalError(fmt::format("init_name: bad InitKind {}", static_cast<int>(kind)));
}

float init_std(InitKind kind, std::int64_t fan_in, std::int64_t fan_out, float sigma) {
  DTRAIN_CHECK_GT(fan_in, 0);
  DTRAIN_CHECK_GT(fan_out, 0);
  switch (kind) {
    case InitKind::kNormal:
      if (!(sigma >= 0.0f) || !std::isfinite(sigma)) {
        throw ConfigError(fmt::format(
            "model.init_sigma: {} is not a valid standard deviation; use a finite value >= 0",
            sigma));
      }
      return sigma;
    case InitKind::kXavier:
      return static_cast<float>(std::sqrt(2.0 / static_cast<double>(fan_in + fan_out)));
    case InitKind::kHe: return static_cast<float>(std::sqrt(2.0 / static_cast<double>(fan_in)));
    case InitKind::kUniform:
      return static_cast<float>(1.0 / std::sqrt(3.0 * static_cast<double>(fan_in)));
  }
  throw InternalError(fmt::format("init_std: bad InitKind {}", static_cast<int>(kind)));
}

void init_weights(tensor::Tensor& w, std::int64_t fan_in, std::int64_t fan_out, InitKind kind,
                  float sigma, Rng& rng) {
  DTRAIN_CHECK(w.is_contiguous(), "init_weights needs a contiguous tensor, got shape {}",
               tensor::shape_str(w.shape()));
  const float stddev = init_std(kind, fan_in, fan_out, sigma);
  float* data = w.data();
  if (kind == InitKind::kUniform) {
    const float bound = stddev * std::sqrt(3.0f);
    for (std::int64_t i = 0; i < w.numel(); ++i) data[i] = bound * (2.0f * rng.uniform() - 1.0f);
    return;
  }
  for (std::int64_t i = 0; i < w.numel(); ++i) data[i] = stddev * rng.normal();
}

void init_bias(tensor::Tensor& b, std::int64_t fan_in, InitKind kind, Rng& rng) {
  DTRAIN_CHECK(b.is_contiguous(), "init_bias needs a contiguous tensor, got shape {}",
               tensor::shape_str(b.shape()));
  if (kind != InitKind::kUniform) {
    b.zero();
    return;
  }
  DTRAIN_CHECK_GT(fan_in, 0);
  const auto bound = static_cast<float>(1.0 / std::sqrt(static_cast<double>(fan_in)));
  float* data = b.data();
  for (std::int64_t i = 0; i < b.numel(); ++i) data[i] = bound * (2.0f * rng.uniform() - 1.0f);
}

}  // namespace dtrain::nn
