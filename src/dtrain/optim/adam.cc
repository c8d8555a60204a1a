#include "dtrain/optim/adam.h"

#include <algorithm>
#include <cmath>
#include <utility>

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::optim {

namespace {

// The per-step scalars of the update, computed once in double.
struct AdamCoefficients {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
};

// L2 (Adam): g = grad + wd * p. Decoupled (AdamW): p *= decay first, g = grad. Then the moments and
// the bias-corrected step of adam.h. Elements [begin, n) one at a time: the tail of the AVX loop
// and the whole range on CPUs without AVX.
template <bool kDecoupled>
void adam_scalar(float* __restrict p, const float* __restrict grad, float* __restrict m,
                 float* __restrict v, std::int64_t begin, std::int64_t n, const AdamCoefficients& c,
                 float wd, float decay) {
  for (std::int64_t i = begin; i < n; ++i) {
    float pi = p[i];
    float g;
    if constexpr (kDecoupled) {
      pi *= decay;
      g = grad[i];
    } else {
      g = grad[i] + wd * pi;
    }
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
  }
}

// The same update eight elements at a time. Written with intrinsics because std::sqrt may set
// errno, which stops GCC from vectorising the plain loop unless the whole build uses
// -fno-math-errno; the arithmetic is the scalar loop's, operation for operation.
template <bool kDecoupled>
void adam_range(float* __restrict p, const float* __restrict grad, float* __restrict m,
                float* __restrict v, std::int64_t n, const AdamCoefficients& c, float wd,
                float decay) {
  std::int64_t i = 0;
#if defined(__AVX__)
  const __m256 beta1 = _mm256_set1_ps(c.beta1);
  const __m256 beta2 = _mm256_set1_ps(c.beta2);
  const __m256 one_minus_beta1 = _mm256_set1_ps(c.one_minus_beta1);
  const __m256 one_minus_beta2 = _mm256_set1_ps(c.one_minus_beta2);
  const __m256 step_size = _mm256_set1_ps(c.step_size);
  const __m256 inv_sqrt_bc2 = _mm256_set1_ps(c.inv_sqrt_bc2);
  const __m256 eps = _mm256_set1_ps(c.eps);
  const __m256 wd8 = _mm256_set1_ps(wd);
  const __m256 decay8 = _mm256_set1_ps(decay);
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    __m256 g = _mm256_loadu_ps(grad + i);
    if constexpr (kDecoupled) {
      pi = _mm256_mul_ps(pi, decay8);
    } else {
      g = _mm256_add_ps(g, _mm256_mul_ps(wd8, pi));
    }
    const __m256 mi = _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(m + i)),
                                    _mm256_mul_ps(one_minus_beta1, g));
    const __m256 vi = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(v + i)),
                                    _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(vi), inv_sqrt_bc2), eps);
    _mm256_storeu_ps(p + i, _mm256_sub_ps(pi, _mm256_div_ps(_mm256_mul_ps(step_size, mi), denom)));
  }
#endif
  adam_scalar<kDecoupled>(p, grad, m, v, i, n, c, wd, decay);
}

}  // namespace

Adam::Adam(const OptimizerConfig& config, std::vector<Segment> segments, bool decoupled)
    : Optimizer(std::move(segments)),
      decoupled_(decoupled),
      beta1_(config.beta1),
      beta2_(config.beta2),
      eps_(static_cast<float>(config.eps)),
      weight_decay_(static_cast<float>(config.weight_decay)),
      exp_avg_(state_numel(), 0),
      exp_avg_sq_(state_numel(), 0) {
  OptimizerConfig checked = config;
  checked.name = decoupled ? "adamw" : "adam";
  validate_optimizer_config(checked);
}

void Adam::step(float* params, const float* grads, double lr) {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  const auto t = static_cast<double>(steps() + 1);
  const double bias_correction1 = 1.0 - std::pow(beta1_, t);
  const double bias_correction2 = 1.0 - std::pow(beta2_, t);
  AdamCoefficients c{};
  c.beta1 = static_cast<float>(beta1_);
  c.beta2 = static_cast<float>(beta2_);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1_);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  c.step_size = static_cast<float>(lr / bias_correction1);
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  c.eps = eps_;
  const auto decay = static_cast<float>(1.0 - lr * static_cast<double>(weight_decay_));
  place_state(params, grads, {&exp_avg_, &exp_avg_sq_});

  for (const Range& range : ranges()) {
    float* p = params + range.param_offset;
    const float* g = grads + range.param_offset;
    float* m = exp_avg_.data() + range.state_offset;
    float* v = exp_avg_sq_.data() + range.state_offset;
    // Element-wise, so splitting a range over the compute threads gives the same bits.
    compute_pool().parallel_for(range.numel, 32768, [&](std::int64_t b, std::int64_t e) {
      if (decoupled_) {
        adam_range<true>(p + b, g + b, m + b, v + b, e - b, c, 0.0f,
                         range.weight_decay ? decay : 1.0f);
      } else {
        adam_range<false>(p + b, g + b, m + b, v + b, e - b, c,
                          range.weight_decay ? weight_decay_ : 0.0f, 1.0f);
      }
    });
  }
  count_step();
}

std::vector<StateTensor> Adam::state() const {
  const std::string prefix = decoupled_ ? "adamw." : "adam.";
  return {StateTensor{prefix + "exp_avg", {exp_avg_.data(), exp_avg_.data() + exp_avg_.size()}},
          StateTensor{prefix + "exp_avg_sq",
                      {exp_avg_sq_.data(), exp_avg_sq_.data() + exp_avg_sq_.size()}}};
}

void Adam::load_state(const std::vector<StateTensor>& state, std::int64_t steps) {
  const std::string prefix = decoupled_ ? "adamw." : "adam.";
  check_state(state, {prefix + "exp_avg", prefix + "exp_avg_sq"}, steps);
  for (std::size_t i = 0; i < state[1].values.size(); ++i) {
    if (state[1].values[i] < 0.0f) {
      throw CheckpointError(fmt::format(
          "optimizer state '{}' holds a negative second moment ({}) at element {}; the checkpoint "
          "is corrupt",
          state[1].name, state[1].values[i], i));
    }
  }
  std::copy(state[0].values.begin(), state[0].values.end(), exp_avg_.data());
  std::copy(state[1].values.begin(), state[1].values.end(), exp_avg_sq_.data());
  set_steps(steps);
}

}  // namespace dtrain::optim
