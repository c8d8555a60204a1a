#include "dtrain/optim/onebit_adam.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::optim {

namespace {

OptimizerConfig as_adam(const OptimizerConfig& config) {
  OptimizerConfig adam = config;
  adam.name = "adam";
  return adam;
}

constexpr float kMasked = std::numeric_limits<float>::infinity();
constexpr const char* kExpAvg = "onebit_adam.exp_avg";
constexpr const char* kExpAvgSq = "onebit_adam.exp_avg_sq";

}  // namespace

OneBitAdam::OneBitAdam(const OptimizerConfig& config, std::vector<Segment> segments)
    : Optimizer(segments),
      warmup_(as_adam(config), std::move(segments), /*decoupled=*/false),
      freeze_step_(config.freeze_step),
      beta1_(static_cast<float>(config.beta1)),
      beta1_double_(config.beta1),
      one_minus_beta1_(static_cast<float>(1.0 - config.beta1)),
      weight_decay_(static_cast<float>(config.weight_decay)),
      inv_sqrt_bc2_(static_cast<float>(
          1.0 / std::sqrt(1.0 - std::pow(config.beta2, static_cast<double>(config.freeze_step))))),
      eps_(static_cast<float>(config.eps)) {
  OptimizerConfig checked = config;
  checked.name = "onebit_adam";
  validate_optimizer_config(checked);
}

void OneBitAdam::freeze(std::vector<float> m, std::vector<float> v) {
  m_ = std::move(m);
  v_ = std::move(v);
  denom_.resize(v_.size());
  // v = 0: no gradient reached the element during the warm-up (a pixel that is always 0). The
  // sign codec sends +-scale there all the same, which eps alone would turn into a step of
  // lr x scale / eps: such elements are masked (DeepSpeed's exp_avg_mask), an infinite
  // denominator.
  for (std::size_t i = 0; i < v_.size(); ++i) {
    denom_[i] = v_[i] > 0.0f ? std::sqrt(v_[i]) * inv_sqrt_bc2_ + eps_ : kMasked;
  }
  moved_ = true;
}

void OneBitAdam::step(float* params, const float* grads, double lr) {
  step(params, grads, lr, 1.0f, nullptr);
}

void OneBitAdam::step(float* params, const float* grads, double lr, float grad_scale,
                      const MomentumExchange& exchange) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  if (!frozen()) {
    warmup_.step(params, grads, lr);
    count_step();
    return;
  }
  if (!moved_) {
    std::vector<StateTensor> adam = warmup_.state();
    freeze(std::move(adam[0].values), std::move(adam[1].values));
  }
  // This rank's momentum, then the ranks' agreed one.
  for (const Range& range : ranges()) {
    const float* g = grads + range.param_offset;
    const float* p = params + range.param_offset;
    float* m = m_.data() + range.state_offset;
    const float wd = range.weight_decay ? weight_decay_ : 0.0f;
    for (std::int64_t i = 0; i < range.numel; ++i) {
      m[i] = beta1_ * m[i] + one_minus_beta1_ * (grad_scale * g[i] + wd * p[i]);
    }
  }
  if (exchange) exchange(std::span<float>(m_));
  const auto t = static_cast<double>(steps() + 1);
  const auto step_size = static_cast<float>(lr / (1.0 - std::pow(beta1_double_, t)));
  for (const Range& range : ranges()) {
    float* p = params + range.param_offset;
    float* m = m_.data() + range.state_offset;
    const float* d = denom_.data() + range.state_offset;
    for (std::int64_t i = 0; i < range.numel; ++i) {
      p[i] -= step_size * m[i] / d[i];
      m[i] = d[i] == kMasked ? 0.0f : m[i];
    }
  }
  count_step();
}

std::vector<StateTensor> OneBitAdam::state() const {
  if (!moved_) {
    std::vector<StateTensor> adam = warmup_.state();
    adam[0].name = kExpAvg;
    adam[1].name = kExpAvgSq;
    return adam;
  }
  return {StateTensor{kExpAvg, m_}, StateTensor{kExpAvgSq, v_}};
}

void OneBitAdam::load_state(const std::vector<StateTensor>& state, std::int64_t steps) {
  check_state(state, {kExpAvg, kExpAvgSq}, steps);
  // Adam's own checks (a negative second moment) under its names.
  std::vector<StateTensor> adam = state;
  adam[0].name = "adam.exp_avg";
  adam[1].name = "adam.exp_avg_sq";
  warmup_.load_state(adam, std::min(steps, freeze_step_));
  set_steps(steps);
  if (steps >= freeze_step_) {
    freeze(std::move(adam[0].values), std::move(adam[1].values));
  } else {
    moved_ = false;
    m_.clear();
    v_.clear();
    denom_.clear();
  }
}

}  // namespace dtrain::optim
