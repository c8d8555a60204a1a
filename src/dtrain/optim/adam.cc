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

// Below this many elements a range is updated on the calling thread (waking a thread costs more).
constexpr std::int64_t kElementsPerTask = 32768;

#if !defined(__AVX__)
// L2 (Adam): g = grad + wd * p. Decoupled (AdamW): p *= decay first, g = grad. Then the moments and
// the bias-corrected step of adam.h. Elements one at a time, on CPUs without AVX.
// kSum2: the gradient is grad[i] + grad2[i] (two ranks' buffers read in place).
template <bool kDecoupled, bool kSum2>
void adam_scalar(float* __restrict p, const float* __restrict grad, const float* __restrict grad2,
                 float* __restrict m, float* __restrict v, std::int64_t n,
                 const AdamCoefficients& c, float wd, float decay) {
  for (std::int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float g = grad[i];
    if constexpr (kSum2) g += grad2[i];
    if constexpr (kDecoupled) {
      pi *= decay;
    } else {
      g = g + wd * pi;
    }
    const float mi = c.beta1 * m[i] + c.one_minus_beta1 * g;
    const float vi = c.beta2 * v[i] + c.one_minus_beta2 * g * g;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - c.step_size * mi / (std::sqrt(vi) * c.inv_sqrt_bc2 + c.eps);
  }
}
#endif

#if defined(__AVX__)
// The update of eight lanes, shared by the loop and its masked tail so that every element goes
// through the same operations wherever a range is cut (Adam::step_range relies on it).
template <bool kDecoupled>
struct Adam8 {
  __m256 beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, inv_sqrt_bc2, eps, wd, decay;

  Adam8(const AdamCoefficients& c, float wd_value, float decay_value)
      : beta1(_mm256_set1_ps(c.beta1)),
        beta2(_mm256_set1_ps(c.beta2)),
        one_minus_beta1(_mm256_set1_ps(c.one_minus_beta1)),
        one_minus_beta2(_mm256_set1_ps(c.one_minus_beta2)),
        step_size(_mm256_set1_ps(c.step_size)),
        inv_sqrt_bc2(_mm256_set1_ps(c.inv_sqrt_bc2)),
        eps(_mm256_set1_ps(c.eps)),
        wd(_mm256_set1_ps(wd_value)),
        decay(_mm256_set1_ps(decay_value)) {}

  // p, g, m, v in; p, m, v out.
  void apply(__m256& p, __m256 g, __m256& m, __m256& v) const {
    if constexpr (kDecoupled) {
      p = _mm256_mul_ps(p, decay);
    } else {
      g = _mm256_add_ps(g, _mm256_mul_ps(wd, p));
    }
    m = _mm256_add_ps(_mm256_mul_ps(beta1, m), _mm256_mul_ps(one_minus_beta1, g));
    v = _mm256_add_ps(_mm256_mul_ps(beta2, v), _mm256_mul_ps(_mm256_mul_ps(one_minus_beta2, g), g));
    const __m256 denom = _mm256_add_ps(_mm256_mul_ps(_mm256_sqrt_ps(v), inv_sqrt_bc2), eps);
    p = _mm256_sub_ps(p, _mm256_div_ps(_mm256_mul_ps(step_size, m), denom));
  }
};
#endif

// The update over n elements, eight at a time. Written with intrinsics because std::sqrt may set
// errno, which stops GCC from vectorising the plain loop unless the whole build uses
// -fno-math-errno; the arithmetic is the scalar loop's, operation for operation. The last n % 8
// elements go through the same vector code with masked loads and stores (masked-off lanes read
// 0, whose update divides by eps > 0 and is not stored), so an element's bits do not depend on
// where a range starts or ends. kSum2: the gradient is grad + grad2, formed in the loop (the same
// bits as summing into a buffer first).
template <bool kDecoupled, bool kSum2>
void adam_range(float* __restrict p, const float* __restrict grad, const float* __restrict grad2,
                float* __restrict m, float* __restrict v, std::int64_t n, const AdamCoefficients& c,
                float wd, float decay) {
#if defined(__AVX__)
  const Adam8<kDecoupled> op(c, wd, decay);
  std::int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 pi = _mm256_loadu_ps(p + i);
    __m256 mi = _mm256_loadu_ps(m + i);
    __m256 vi = _mm256_loadu_ps(v + i);
    __m256 gi = _mm256_loadu_ps(grad + i);
    if constexpr (kSum2) gi = _mm256_add_ps(gi, _mm256_loadu_ps(grad2 + i));
    op.apply(pi, gi, mi, vi);
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(p + i, pi);
  }
  if (i < n) {
    // Lanes [0, n - i) on: a window into 8 "on" words followed by 8 "off" words.
    alignas(32) static constexpr std::int32_t kLanes[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                            0,  0,  0,  0,  0,  0,  0,  0};
    const __m256i mask = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanes + 8 - (n - i)));
    __m256 pi = _mm256_maskload_ps(p + i, mask);
    __m256 mi = _mm256_maskload_ps(m + i, mask);
    __m256 vi = _mm256_maskload_ps(v + i, mask);
    __m256 gi = _mm256_maskload_ps(grad + i, mask);
    if constexpr (kSum2) gi = _mm256_add_ps(gi, _mm256_maskload_ps(grad2 + i, mask));
    op.apply(pi, gi, mi, vi);
    _mm256_maskstore_ps(m + i, mask, mi);
    _mm256_maskstore_ps(v + i, mask, vi);
    _mm256_maskstore_ps(p + i, mask, pi);
  }
#else
  adam_scalar<kDecoupled, kSum2>(p, grad, grad2, m, v, n, c, wd, decay);
#endif
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

AdamCoefficients Adam::coefficients(double lr) const {
  DTRAIN_CHECK(std::isfinite(lr) && lr >= 0.0, "learning rate {} must be finite and >= 0", lr);
  const auto t = static_cast<double>(steps() + 1);
  AdamCoefficients c{};
  c.beta1 = static_cast<float>(beta1_);
  c.beta2 = static_cast<float>(beta2_);
  c.one_minus_beta1 = static_cast<float>(1.0 - beta1_);
  c.one_minus_beta2 = static_cast<float>(1.0 - beta2_);
  c.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1_, t)));
  c.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2_, t)));
  c.eps = eps_;
  c.decay = static_cast<float>(1.0 - lr * static_cast<double>(weight_decay_));
  return c;
}

void Adam::update(float* p, const float* g, const float* g2, float* m, float* v, std::int64_t n,
                  const AdamCoefficients& c, bool weight_decay) const {
  const float wd = weight_decay ? weight_decay_ : 0.0f;
  const float decay = weight_decay ? c.decay : 1.0f;
  if (decoupled_) {
    if (g2 == nullptr) {
      adam_range<true, false>(p, g, nullptr, m, v, n, c, 0.0f, decay);
    } else {
      adam_range<true, true>(p, g, g2, m, v, n, c, 0.0f, decay);
    }
  } else if (g2 == nullptr) {
    adam_range<false, false>(p, g, nullptr, m, v, n, c, wd, 1.0f);
  } else {
    adam_range<false, true>(p, g, g2, m, v, n, c, wd, 1.0f);
  }
}

void Adam::step(float* params, const float* grads, double lr) {
  const AdamCoefficients c = coefficients(lr);
  place_state(params, grads, {&exp_avg_, &exp_avg_sq_});
  for (const Range& range : ranges()) {
    float* p = params + range.param_offset;
    const float* g = grads + range.param_offset;
    float* m = exp_avg_.data() + range.state_offset;
    float* v = exp_avg_sq_.data() + range.state_offset;
    // Element-wise, so splitting a range over the compute threads gives the same bits.
    compute_pool().parallel_for(range.numel, kElementsPerTask, [&](std::int64_t b, std::int64_t e) {
      update(p + b, g + b, nullptr, m + b, v + b, e - b, c, range.weight_decay);
    });
  }
  count_step();
}

void Adam::step_range(float* params, std::span<const float* const> grads, double lr,
                      std::int64_t begin, std::int64_t end) {
  DTRAIN_CHECK(!grads.empty(), "Adam::step_range needs at least one gradient buffer");
  const AdamCoefficients c = coefficients(lr);  // steps() moves only at finish_step()
  place_state_for_range(params, {&exp_avg_, &exp_avg_sq_});
  for_each_range_part(begin, end, [&](const Range& range, std::int64_t first, std::int64_t count) {
    const std::int64_t at = range.param_offset + first;
    float* p = params + at;
    float* m = exp_avg_.data() + range.state_offset + first;
    float* v = exp_avg_sq_.data() + range.state_offset + first;
    compute_pool().parallel_for(count, kElementsPerTask, [&](std::int64_t b, std::int64_t e) {
      if (grads.size() <= 2) {  // one pass: two ranks' gradients are summed in the loop
        const float* g2 = grads.size() == 2 ? grads[1] + at + b : nullptr;
        update(p + b, grads[0] + at + b, g2, m + b, v + b, e - b, c, range.weight_decay);
        return;
      }
      for_each_summed_chunk(
          grads, at, b, e, [&](std::int64_t lo, const float* sums, std::int64_t n) {
            update(p + lo, sums, nullptr, m + lo, v + lo, n, c, range.weight_decay);
          });
    });
  });
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
