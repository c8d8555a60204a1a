#include "dtrain/nn/init.h"

#include <cmath>

#include "dtrain/base/error.h"

namespace dtrain::nn {

InitKind parse_init(std::string_view name) {
  if (name == "normal") return InitKind::kNormal;
  if (name == "xavier") return InitKind::kXavier;
  if (name == "he") return InitKind::kHe;
  throw ConfigError(fmt::format(
      "model.init: unknown weight initialisation '{}'; accepted: normal, xavier, he", name));
}

std::string_view init_name(InitKind kind) {
  switch (kind) {
    case InitKind::kNormal: return "normal";
    case InitKind::kXavier: return "xavier";
    case InitKind::kHe: return "he";
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
  }
  throw InternalError(fmt::format("init_std: bad InitKind {}", static_cast<int>(kind)));
}

void init_weights(tensor::Tensor& w, std::int64_t fan_in, std::int64_t fan_out, InitKind kind,
                  float sigma, Rng& rng) {
  DTRAIN_CHECK(w.is_contiguous(), "init_weights needs a contiguous tensor, got shape {}",
               tensor::shape_str(w.shape()));
  const float stddev = init_std(kind, fan_in, fan_out, sigma);
  float* data = w.data();
  for (std::int64_t i = 0; i < w.numel(); ++i) data[i] = stddev * rng.normal();
}

}  // namespace dtrain::nn
