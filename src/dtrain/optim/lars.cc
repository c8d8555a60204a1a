#include "dtrain/optim/lars.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::optim {

namespace {

// sum(x^2) over n elements in double. Eight independent partial sums keep the loop free of a
// serial dependency (and vectorisable without reassociating one accumulator).
double squared_norm(const float* __restrict x, std::int64_t n) {
  constexpr std::int64_t kLanes = 8;
  double partial[kLanes] = {};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (std::int64_t lane = 0; lane < kLanes; ++lane) {
      const auto value = static_cast<double>(x[i + lane]);
      partial[lane] += value * value;
    }
  }
  double sum = 0.0;
  for (; i < n; ++i) sum += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  for (double value : partial) sum += value;
  return sum;
}

// v = mu * v + scale * (g + wd * p);  p -= lr * v.
void lars_momentum(float* __restrict p, const float* __restrict g, float* __restrict v,
                   std::int64_t n, float lr, float scale, float wd, float mu) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float vi = mu * v[i] + scale * (g[i] + wd * p[i]);
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

// p -= lr * scale * (g + wd * p).
void lars_plain(float* __restrict p, const float* __restrict g, std::int64_t n, float lr,
                float scale, float wd) {
  const float step = lr * scale;
  for (std::int64_t i = 0; i < n; ++i) p[i] -= step * (g[i] + wd * p[i]);
}

}  // namespace

Lars::Lars(const OptimizerConfig& config, std::vector<Segment> segments)
    : Optimizer(std::move(segments)),
      momentum_(static_cast<float>(config.momentum)),
      weight_decay_(config.weight_decay),
      trust_coefficient_(config.trust_coefficient),
      eps_(config.lars_eps),
      last_local_lrs_(this->segments().size(), 1.0) {
  OptimizerConfig checked = config;
  checked.name = "lars";
  validate_optimizer_config(checked);
  if (config.momentum > 0.0) velocity_ = PlacedFloats(state_numel(), 0);
}

void Lars::step(float* params, const float* grads, double lr) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  const auto lr_f = static_cast<float>(lr);
  place_state(params, grads, {&velocity_});
  const std::vector<Segment>& segs = segments();
  for (std::size_t s = 0; s < segs.size(); ++s) {
    const Segment& segment = segs[s];
    if (segment.numel == 0) continue;
    float* p = params + segment.offset;
    const float* g = grads + segment.offset;
    double local_lr = 1.0;
    double wd = 0.0;
    if (segment.weight_decay) {
      wd = weight_decay_;
      const double p_norm = std::sqrt(squared_norm(p, segment.numel));
      const double g_norm = std::sqrt(squared_norm(g, segment.numel));
      if (p_norm > 0.0 && g_norm > 0.0) {
        local_lr = trust_coefficient_ * p_norm / (g_norm + wd * p_norm + eps_);
      }
    }
    last_local_lrs_[s] = local_lr;
    if (velocity_.empty()) {
      lars_plain(p, g, segment.numel, lr_f, static_cast<float>(local_lr), static_cast<float>(wd));
    } else {
      lars_momentum(p, g, velocity_.data() + state_offset(s), segment.numel, lr_f,
                    static_cast<float>(local_lr), static_cast<float>(wd), momentum_);
    }
  }
  count_step();
}

std::vector<StateTensor> Lars::state() const {
  if (velocity_.empty()) return {};
  return {StateTensor{"lars.momentum", {velocity_.data(), velocity_.data() + velocity_.size()}}};
}

void Lars::load_state(const std::vector<StateTensor>& state, std::int64_t steps) {
  if (velocity_.empty()) {
    check_state(state, {}, steps);
  } else {
    check_state(state, {"lars.momentum"}, steps);
    std::copy(state[0].values.begin(), state[0].values.end(), velocity_.data());
  }
  set_steps(steps);
}

}  // namespace dtrain::optim
