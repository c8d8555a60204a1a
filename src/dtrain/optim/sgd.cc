#include "dtrain/optim/sgd.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::optim {

namespace {

// Below this many elements a range is updated on the calling thread (waking a thread costs more).
constexpr std::int64_t kElementsPerTask = 32768;

// p -= lr * (g + wd * p) over n elements.
void sgd_plain(float* __restrict p, const float* __restrict g, std::int64_t n, float lr, float wd) {
  for (std::int64_t i = 0; i < n; ++i) p[i] -= lr * (g[i] + wd * p[i]);
}

// v = mu * v + (g + wd * p);  p -= lr * (nesterov ? g + wd * p + mu * v : v).
template <bool kNesterov>
void sgd_momentum(float* __restrict p, const float* __restrict g, float* __restrict v,
                  std::int64_t n, float lr, float wd, float mu) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = g[i] + wd * p[i];
    const float vi = mu * v[i] + gi;
    v[i] = vi;
    if constexpr (kNesterov) {
      p[i] -= lr * (gi + mu * vi);
    } else {
      p[i] -= lr * vi;
    }
  }
}

// sgd_momentum<false> with g = a + b, formed in the loop: the update of two ranks' gradient
// buffers read in place (the same bits as summing first: a + b, then the same operations).
void sgd_momentum_sum2(float* __restrict p, const float* __restrict a, const float* __restrict b,
                       float* __restrict v, std::int64_t n, float lr, float wd, float mu) {
  for (std::int64_t i = 0; i < n; ++i) {
    const float gi = (a[i] + b[i]) + wd * p[i];
    const float vi = mu * v[i] + gi;
    v[i] = vi;
    p[i] -= lr * vi;
  }
}

}  // namespace

Sgd::Sgd(const OptimizerConfig& config, std::vector<Segment> segments)
    : Optimizer(std::move(segments)),
      momentum_(static_cast<float>(config.momentum)),
      weight_decay_(static_cast<float>(config.weight_decay)),
      nesterov_(config.nesterov) {
  OptimizerConfig checked = config;
  checked.name = "sgd";
  validate_optimizer_config(checked);
  if (config.momentum > 0.0) velocity_ = PlacedFloats(state_numel(), 0);
}

void Sgd::update_serial(float* p, const float* g, float* v, std::int64_t n, float lr,
                        float wd) const {
  if (v == nullptr) {
    sgd_plain(p, g, n, lr, wd);
  } else if (nesterov_) {
    sgd_momentum<true>(p, g, v, n, lr, wd, momentum_);
  } else {
    sgd_momentum<false>(p, g, v, n, lr, wd, momentum_);
  }
}

void Sgd::update(float* p, const float* g, float* v, std::int64_t n, float lr, float wd) const {
  // Element-wise, so splitting a range over the compute threads gives the same bits.
  compute_pool().parallel_for(n, kElementsPerTask, [&](std::int64_t b, std::int64_t e) {
    update_serial(p + b, g + b, v == nullptr ? nullptr : v + b, e - b, lr, wd);
  });
}

void Sgd::step(float* params, const float* grads, double lr) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  place_state(params, grads, {&velocity_});
  for (const Range& range : ranges()) {
    float* v = velocity_.empty() ? nullptr : velocity_.data() + range.state_offset;
    update(params + range.param_offset, grads + range.param_offset, v, range.numel,
           static_cast<float>(lr), range.weight_decay ? weight_decay_ : 0.0f);
  }
  count_step();
}

void Sgd::step_range(float* params, std::span<const float* const> grads, double lr,
                     std::int64_t begin, std::int64_t end) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  DTRAIN_CHECK(!grads.empty(), "Sgd::step_range needs at least one gradient buffer");
  place_state_for_range(params, {&velocity_});
  const auto lr_f = static_cast<float>(lr);
  for_each_range_part(begin, end, [&](const Range& range, std::int64_t first, std::int64_t count) {
    const std::int64_t at = range.param_offset + first;
    float* p = params + at;
    float* v = velocity_.empty() ? nullptr : velocity_.data() + range.state_offset + first;
    const float wd = range.weight_decay ? weight_decay_ : 0.0f;
    if (grads.size() == 1) {
      update(p, grads[0] + at, v, count, lr_f, wd);
      return;
    }
    if (grads.size() == 2 && v != nullptr && !nesterov_) {
      // The case fused updates are for (two thread ranks): one pass, nothing stored but p and v.
      const float* a = grads[0] + at;
      const float* g = grads[1] + at;
      compute_pool().parallel_for(count, kElementsPerTask, [&](std::int64_t b, std::int64_t e) {
        sgd_momentum_sum2(p + b, a + b, g + b, v + b, e - b, lr_f, wd, momentum_);
      });
      return;
    }
    // Other counts: over the compute threads, each summing a chunk at a time on its stack, then
    // the usual update of that chunk.
    compute_pool().parallel_for(count, kElementsPerTask, [&](std::int64_t b, std::int64_t e) {
      for_each_summed_chunk(
          grads, at, b, e, [&](std::int64_t lo, const float* sums, std::int64_t n) {
            update_serial(p + lo, sums, v == nullptr ? nullptr : v + lo, n, lr_f, wd);
          });
    });
  });
}

std::vector<StateTensor> Sgd::state() const {
  if (velocity_.empty()) return {};
  return {StateTensor{"sgd.momentum", {velocity_.data(), velocity_.data() + velocity_.size()}}};
}

void Sgd::load_state(const std::vector<StateTensor>& state, std::int64_t steps) {
  if (velocity_.empty()) {
    check_state(state, {}, steps);
  } else {
    check_state(state, {"sgd.momentum"}, steps);
    std::copy(state[0].values.begin(), state[0].values.end(), velocity_.data());
  }
  set_steps(steps);
}

}  // namespace dtrain::optim
