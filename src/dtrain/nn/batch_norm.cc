#include "dtrain/nn/batch_norm.h"

#include <algorithm>
#include <cmath>

// The AVX-512 passes need DQ (_mm512_extractf32x8_ps) as well as F.
#if defined(__AVX512F__) && defined(__AVX512DQ__)
#define DTRAIN_BATCH_NORM_AVX512 1
#include <immintrin.h>
#endif

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

// Values per thread below which a second thread costs more than it saves.
constexpr std::int64_t kValueGrain = 1 << 14;

// The spatial size H*W of a (B, F) or (B, F, H, W) shape.
std::int64_t plane_size(const tensor::Shape& shape) {
  return shape.size() == 4 ? shape[2] * shape[3] : 1;
}

// Runs fn(c) for every channel, channels split over the compute pool; each channel is handled by
// exactly one thread in a fixed order, so sums do not depend on the thread count.
template <typename Fn>
void for_each_channel(std::int64_t channels, std::int64_t values_per_channel, const Fn& fn) {
  const std::int64_t grain =
      std::max<std::int64_t>(1, kValueGrain / std::max<std::int64_t>(1, values_per_channel));
  compute_pool().parallel_for(channels, grain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t c = begin; c < end; ++c) fn(c);
  });
}

// The per-channel constants of the normalization: xhat = (x - mean) * inv_std, output gamma xhat +
// beta, with relu max(that, 0).
struct PlaneNorm {
  float mean, inv_std, gamma, beta;
  bool relu;
};

#if defined(DTRAIN_BATCH_NORM_AVX512)
inline __mmask16 tail16(std::int64_t count) {
  return count >= 16 ? static_cast<__mmask16>(0xffffu)
                     : static_cast<__mmask16>((1u << static_cast<unsigned>(count)) - 1u);
}
#endif

// A channel's values are B planes of H*W floats, F planes apart: 3 KB at a ResNet's first stage,
// 784 and 196 bytes at the second and third. The hardware prefetchers start over at every plane,
// and a plane of 3 to 49 cache lines ends before they help, so the passes waited on memory at every
// plane. Each pass now prefetches the plane prefetch_distance(H*W) planes ahead in its own order
// (the first one at least kPrefetchFloats of the channel ahead), one line per 16 values it reads:
// `ahead` below is that plane's start for the same stream (the current plane itself when none is
// left, a harmless repeat). Measured on BatchNorm alone at the ResNet's three shapes (batch 128,
// caches flushed between calls): forward and backward 12-17% faster than without; 256 to 512
// floats ahead did as well as 1024, 2048 and 4096 worse.
constexpr std::int64_t kPrefetchFloats = 512;

std::int64_t prefetch_distance(std::int64_t plane) {
  return std::max<std::int64_t>(1, (kPrefetchFloats + plane - 1) / plane);
}

// Line p / 16 of a plane of n floats starting at ahead (p < n, a multiple of 16); the plane's last
// line with the last p (a plane need not start on a line).
inline void prefetch_line(const float* ahead, std::int64_t p, std::int64_t n) {
#if defined(DTRAIN_BATCH_NORM_AVX512)
  _mm_prefetch(reinterpret_cast<const char*>(ahead + p), _MM_HINT_T0);
  if (p + 16 >= n) _mm_prefetch(reinterpret_cast<const char*>(ahead + n - 1), _MM_HINT_T0);
#else
  (void)ahead;
  (void)p;
  (void)n;
#endif
}

// The per-channel passes below, one plane (H*W values of one image and channel) at a time. The
// sums run in double, in vector lanes (16 with AVX-512: two registers of 8 doubles, lane l taking
// values l, l + 16, ...; the tail of a plane is a masked load, whose zeros add nothing), carried
// across the planes of a channel and added up once per channel in a fixed order: the result does
// not depend on the thread count. Written with intrinsics because GCC does not vectorise a double
// reduction without -ffast-math: the scalar loop (one dependent add per value) was 9% of a ResNet
// step.
struct PlaneSums {
#if defined(DTRAIN_BATCH_NORM_AVX512)
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd();
  __m512d b0 = _mm512_setzero_pd(), b1 = _mm512_setzero_pd();
#else
  double a[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  double b[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#endif

  // a += x, b += x * x over the plane; prefetches the plane at x_ahead (see prefetch_line).
  void add_sum_and_squares(const float* x, std::int64_t n, const float* x_ahead) {
#if defined(DTRAIN_BATCH_NORM_AVX512)
    std::int64_t p = 0;
    for (; p + 16 <= n; p += 16) {
      prefetch_line(x_ahead, p, n);
      add_squares(_mm256_loadu_ps(x + p), _mm256_loadu_ps(x + p + 8));
    }
    if (p < n) {
      prefetch_line(x_ahead, p, n);
      const __mmask16 mask = tail_mask(n - p);
      add_squares(load_half(mask, x + p), load_half(mask >> 8, x + p + 8));
    }
#else
    (void)x_ahead;
    for (std::int64_t p = 0; p < n; ++p) {
      const double v = x[p];
      a[p % 8] += v;
      b[p % 8] += v * v;
    }
#endif
  }

  // a += g, b += g * xhat over the plane, xhat = (x - mean) * inv_std recomputed from x, g = dy
  // (with relu: where gamma xhat + beta, as normalize_plane rounds it, is > 0, else 0).
  // Prefetches the planes at x_ahead and dy_ahead.
  void add_sum_and_products(const float* x, const float* dy, std::int64_t n, const PlaneNorm& k,
                            const float* x_ahead, const float* dy_ahead) {
#if defined(DTRAIN_BATCH_NORM_AVX512)
    const __m512 mean = _mm512_set1_ps(k.mean), inv_std = _mm512_set1_ps(k.inv_std);
    const __m512 gamma = _mm512_set1_ps(k.gamma), beta = _mm512_set1_ps(k.beta);
    const __m512 zero = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < n; p += 16) {
      prefetch_line(x_ahead, p, n);
      prefetch_line(dy_ahead, p, n);
      const __mmask16 mask = tail16(n - p);
      const __m512 h =
          _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + p), mean), inv_std);
      __mmask16 live = mask;
      if (k.relu) {
        live = _mm512_mask_cmp_ps_mask(mask, _mm512_fmadd_ps(gamma, h, beta), zero, _CMP_GT_OQ);
      }
      // Masked-off lanes have g = 0 and add nothing (their h is finite).
      const __m512 g = _mm512_maskz_loadu_ps(live, dy + p);
      add_products(_mm512_extractf32x8_ps(g, 0), _mm512_extractf32x8_ps(g, 1),
                   _mm512_extractf32x8_ps(h, 0), _mm512_extractf32x8_ps(h, 1));
    }
#else
    (void)x_ahead;
    (void)dy_ahead;
    for (std::int64_t p = 0; p < n; ++p) {
      const float h = (x[p] - k.mean) * k.inv_std;
      const double g = !k.relu || std::fma(k.gamma, h, k.beta) > 0.0f ? dy[p] : 0.0f;
      a[p % 8] += g;
      b[p % 8] += g * h;
    }
#endif
  }

  // The lanes' totals, added in a fixed order.
  void totals(double& sum_a, double& sum_b) const {
#if defined(DTRAIN_BATCH_NORM_AVX512)
    alignas(64) double lanes_a[8], lanes_b[8];
    _mm512_store_pd(lanes_a, _mm512_add_pd(a0, a1));
    _mm512_store_pd(lanes_b, _mm512_add_pd(b0, b1));
    sum_a = sum_b = 0.0;
    for (int l = 0; l < 8; ++l) {
      sum_a += lanes_a[l];
      sum_b += lanes_b[l];
    }
#else
    sum_a = sum_b = 0.0;
    for (int l = 0; l < 8; ++l) {
      sum_a += a[l];
      sum_b += b[l];
    }
#endif
  }

#if defined(DTRAIN_BATCH_NORM_AVX512)
 private:
  static __mmask16 tail_mask(std::int64_t count) {
    return static_cast<__mmask16>((1u << static_cast<unsigned>(count)) - 1u);
  }
  // _mm512_cvtps_pd, spelled with a zero-masked form: GCC 12 warns (maybe-uninitialized) on the
  // unmasked intrinsic's undefined source.
  static __m512d to_double(__m256 v) { return _mm512_maskz_cvtps_pd(0xff, v); }
  // 8 floats from the low 8 bits of mask (masked-off lanes read as 0 and touch no memory).
  static __m256 load_half(unsigned mask, const float* p) {
    return _mm256_maskz_loadu_ps(static_cast<__mmask8>(mask & 0xffu), p);
  }
  void add_squares(__m256 v_lo, __m256 v_hi) {
    const __m512d lo = to_double(v_lo);
    const __m512d hi = to_double(v_hi);
    a0 = _mm512_add_pd(a0, lo);
    a1 = _mm512_add_pd(a1, hi);
    b0 = _mm512_fmadd_pd(lo, lo, b0);
    b1 = _mm512_fmadd_pd(hi, hi, b1);
  }
  void add_products(__m256 g_lo8, __m256 g_hi8, __m256 h_lo8, __m256 h_hi8) {
    const __m512d g_lo = to_double(g_lo8);
    const __m512d g_hi = to_double(g_hi8);
    a0 = _mm512_add_pd(a0, g_lo);
    a1 = _mm512_add_pd(a1, g_hi);
    b0 = _mm512_fmadd_pd(g_lo, to_double(h_lo8), b0);
    b1 = _mm512_fmadd_pd(g_hi, to_double(h_hi8), b1);
  }
#endif
};

// Channel c's sum and sum of squares of x (batch, features, plane) into stats (double lanes):
// the one definition the two-pass and the fused training paths share, so they give the same bits.
void sum_channel(const float* x, std::int64_t batch, std::int64_t features, std::int64_t plane,
                 std::int64_t c, ChannelStats& stats) {
  PlaneSums sums;
  const std::int64_t distance = prefetch_distance(plane);
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t ahead = b + distance < batch ? b + distance : b;
    sums.add_sum_and_squares(x + (b * features + c) * plane, plane,
                             x + (ahead * features + c) * plane);
  }
  sums.totals(stats.sum[static_cast<std::size_t>(c)], stats.sum_sq[static_cast<std::size_t>(c)]);
}

// y = gamma * xhat + beta over one plane, with relu max(., 0) of it as one fma: backward recomputes
// that fma for the mask and must get the same bits. With a residual s (non-null), then y =
// max(y + s, 0), as tensor::add_relu(y, s) gives it.
// Prefetches the planes at x_ahead and residual_ahead (null without a residual).
void normalize_plane(const float* x, const float* residual, float* y, std::int64_t n,
                     const PlaneNorm& k, const float* x_ahead, const float* residual_ahead) {
#if defined(DTRAIN_BATCH_NORM_AVX512)
  const __m512 mean = _mm512_set1_ps(k.mean), inv_std = _mm512_set1_ps(k.inv_std);
  const __m512 gamma = _mm512_set1_ps(k.gamma), beta = _mm512_set1_ps(k.beta);
  const __m512 zero = _mm512_setzero_ps();
  for (std::int64_t p = 0; p < n; p += 16) {
    prefetch_line(x_ahead, p, n);
    if (residual != nullptr) prefetch_line(residual_ahead, p, n);
    const __mmask16 mask = tail16(n - p);
    const __m512 h =
        _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + p), mean), inv_std);
    __m512 v = _mm512_fmadd_ps(gamma, h, beta);
    if (k.relu) v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
    if (residual != nullptr) {
      v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, residual + p));
      v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, zero, _CMP_GT_OQ), v);
    }
    _mm512_mask_storeu_ps(y + p, mask, v);
  }
#else
  (void)x_ahead;
  (void)residual_ahead;
  for (std::int64_t p = 0; p < n; ++p) {
    const float v = std::fma(k.gamma, (x[p] - k.mean) * k.inv_std, k.beta);
    y[p] = !k.relu || v > 0.0f ? v : 0.0f;
    if (residual != nullptr) {
      const float sum = y[p] + residual[p];
      y[p] = sum > 0.0f ? sum : 0.0f;
    }
  }
#endif
}

// dx = scale * (g - mean_dy - xhat * mean_dy_xhat) over one plane, xhat recomputed from x and g =
// dy (where the fused ReLU's recomputed output is > 0 with relu, else 0).
// Prefetches the planes at x_ahead and dy_ahead.
void batch_norm_dx_plane(const float* x, const float* dy, float* dx, std::int64_t n,
                         const PlaneNorm& k, float scale, float mean_dy, float mean_dy_xhat,
                         const float* x_ahead, const float* dy_ahead) {
#if defined(DTRAIN_BATCH_NORM_AVX512)
  const __m512 mean = _mm512_set1_ps(k.mean), inv_std = _mm512_set1_ps(k.inv_std);
  const __m512 gamma = _mm512_set1_ps(k.gamma), beta = _mm512_set1_ps(k.beta);
  const __m512 zero = _mm512_setzero_ps(), scale_v = _mm512_set1_ps(scale);
  const __m512 mean_dy_v = _mm512_set1_ps(mean_dy), mean_dy_xhat_v = _mm512_set1_ps(mean_dy_xhat);
  for (std::int64_t p = 0; p < n; p += 16) {
    prefetch_line(x_ahead, p, n);
    prefetch_line(dy_ahead, p, n);
    const __mmask16 mask = tail16(n - p);
    const __m512 h =
        _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(mask, x + p), mean), inv_std);
    __mmask16 live = mask;
    if (k.relu)
      live = _mm512_mask_cmp_ps_mask(mask, _mm512_fmadd_ps(gamma, h, beta), zero, _CMP_GT_OQ);
    const __m512 g = _mm512_maskz_loadu_ps(live, dy + p);
    const __m512 t = _mm512_fnmadd_ps(h, mean_dy_xhat_v, _mm512_sub_ps(g, mean_dy_v));
    _mm512_mask_storeu_ps(dx + p, mask, _mm512_mul_ps(scale_v, t));
  }
#else
  (void)x_ahead;
  (void)dy_ahead;
  for (std::int64_t p = 0; p < n; ++p) {
    const float h = (x[p] - k.mean) * k.inv_std;
    const float g = !k.relu || std::fma(k.gamma, h, k.beta) > 0.0f ? dy[p] : 0.0f;
    dx[p] = scale * (g - mean_dy - h * mean_dy_xhat);
  }
#endif
}

}  // namespace

BatchNorm::BatchNorm(std::string name, std::int64_t features, float momentum, float eps)
    : Layer(std::move(name)), features_(features), momentum_(momentum), eps_(eps) {
  if (features_ <= 0 || !(momentum_ >= 0.0f && momentum_ <= 1.0f) || !(eps_ > 0.0f)) {
    throw ConfigError(fmt::format(
        "layer {}: BatchNorm needs features > 0, momentum in [0, 1] and eps > 0, got {}, {}, {}",
        this->name(), features_, momentum_, eps_));
  }
}

std::string BatchNorm::describe() const {
  return fmt::format("BatchNorm({}, momentum {}, eps {})", features_, momentum_, eps_);
}

tensor::Shape BatchNorm::output_shape(const tensor::Shape& input) const {
  if ((input.size() != 2 && input.size() != 4) || input[1] != features_) {
    throw ShapeError(fmt::format(
        "layer {} ({}) expects input [B, {}] or [B, {}, H, W], got {}; check the previous "
        "layer's output",
        name(), describe(), features_, features_, tensor::batch_shape_str(input)));
  }
  return input;
}

void BatchNorm::declare(ParamStore& store) {
  gamma_index_ = store.add_param(name() + ".weight", {features_}, /*weight_decay=*/false);
  beta_index_ = store.add_param(name() + ".bias", {features_}, /*weight_decay=*/false);
  mean_index_ = store.add_buffer(name() + ".running_mean", {features_});
  var_index_ = store.add_buffer(name() + ".running_var", {features_});
}

void BatchNorm::bind(ParamStore& store) {
  gamma_ = store.param(gamma_index_);
  beta_ = store.param(beta_index_);
  gamma_grad_ = store.grad(gamma_index_);
  beta_grad_ = store.grad(beta_index_);
  running_mean_ = store.buffer(mean_index_);
  running_var_ = store.buffer(var_index_);
}

void BatchNorm::init(Rng& /*rng*/) {
  gamma_.fill(1.0f);
  beta_.zero();
  running_mean_.zero();
  running_var_.fill(1.0f);
}

void BatchNorm::channel_sums(const tensor::Tensor& x, ChannelStats& stats) const {
  output_shape(x.shape());
  const std::int64_t batch = x.dim(0);
  const std::int64_t plane = plane_size(x.shape());
  stats.sum.assign(static_cast<std::size_t>(features_), 0.0);
  stats.sum_sq.assign(static_cast<std::size_t>(features_), 0.0);
  stats.count = batch * plane;
  const float* xd = x.data();
  for_each_channel(features_, stats.count,
                   [&](std::int64_t c) { sum_channel(xd, batch, features_, plane, c, stats); });
}

void BatchNorm::check_count(const tensor::Shape& input) const {
  if (count_ <= 1) {
    throw ShapeError(fmt::format(
        "layer {} ({}): train mode needs more than 1 value per channel to estimate a variance, "
        "got input {} ({} per channel); use a batch of at least 2 or eval mode",
        name(), describe(), tensor::shape_str(input), count_));
  }
}

const tensor::Tensor& BatchNorm::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  output_shape(x.shape());
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  const std::int64_t batch = x.dim(0);
  const std::int64_t plane = plane_size(x.shape());
  mode_ = ctx.mode;
  x_ = x;
  mean_.resize(static_cast<std::size_t>(features_));
  inv_std_.resize(static_cast<std::size_t>(features_));
  float* run_mean = running_mean_.data();
  float* run_var = running_var_.data();
  y_.ensure_shape(x.shape());
  const float* xd = x.data();
  float* y = y_.data();
  const float* gamma = gamma_.data();
  const float* beta = beta_.data();
  const std::int64_t distance = prefetch_distance(plane);
  const auto normalize_channel = [&](std::int64_t c) {
    const auto i = static_cast<std::size_t>(c);
    // Last image first: right after the channel's sums its last planes are the likeliest still in
    // cache (a ResNet's first stage has 400 KB per channel at batch 128, with L2 at 1 MB).
    for (std::int64_t b = batch - 1; b >= 0; --b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      const std::int64_t ahead = ((b >= distance ? b - distance : b) * features_ + c) * plane;
      normalize_plane(xd + offset, residual_ != nullptr ? residual_ + offset : nullptr, y + offset,
                      plane, PlaneNorm{mean_[i], inv_std_[i], gamma[c], beta[c], relu_}, xd + ahead,
                      residual_ != nullptr ? residual_ + ahead : nullptr);
    }
  };
  // The batch's mean and 1 / std of channel c from its sums; updates the running statistics.
  const auto channel_statistics = [&](std::int64_t c) {
    const auto i = static_cast<std::size_t>(c);
    const double n = static_cast<double>(count_);
    const double m = stats_.sum[i] / n;
    const double var = std::max(stats_.sum_sq[i] / n - m * m, 0.0);
    mean_[i] = static_cast<float>(m);
    inv_std_[i] = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps_)));
    run_mean[c] = static_cast<float>((1.0 - momentum_) * run_mean[c] + momentum_ * m);
    run_var[c] =
        static_cast<float>((1.0 - momentum_) * run_var[c] + momentum_ * var * n / (n - 1.0));
  };
  if (mode_ == Mode::kTrain && reducer_ == nullptr) {
    // No other rank's sums to wait for: each channel is normalized right after its statistics,
    // while its B*H*W values (400 KB at a ResNet's first stage at batch 128) are still in L2,
    // instead of a second pass over the whole tensor from memory. The same operations in the same
    // order as the two-pass path below, so the same bits.
    count_ = batch * plane;
    check_count(x.shape());
    stats_.sum.assign(static_cast<std::size_t>(features_), 0.0);
    stats_.sum_sq.assign(static_cast<std::size_t>(features_), 0.0);
    stats_.count = count_;
    for_each_channel(features_, count_, [&](std::int64_t c) {
      sum_channel(xd, batch, features_, plane, c, stats_);
      channel_statistics(c);
      normalize_channel(c);
    });
    return y_;
  }
  if (mode_ == Mode::kTrain) {
    channel_sums(x, stats_);
    if (reducer_ != nullptr) reducer_->reduce_statistics(stats_);
    count_ = stats_.count;
    check_count(x.shape());
    for (std::int64_t c = 0; c < features_; ++c) channel_statistics(c);
  } else {
    count_ = batch * plane;
    for (std::int64_t c = 0; c < features_; ++c) {
      const auto i = static_cast<std::size_t>(c);
      mean_[i] = run_mean[c];
      inv_std_[i] = static_cast<float>(
          1.0 / std::sqrt(static_cast<double>(run_var[c]) + static_cast<double>(eps_)));
    }
  }
  for_each_channel(features_, batch * plane, normalize_channel);
  return y_;
}

const tensor::Tensor& BatchNorm::forward_add_relu(const tensor::Tensor& x,
                                                  const tensor::Tensor& shortcut,
                                                  const ForwardContext& ctx) {
  DTRAIN_CHECK(shortcut.shape() == x.shape() && shortcut.is_contiguous(),
               "layer {}: shortcut shape {} differs from input shape {}", name(),
               tensor::shape_str(shortcut.shape()), tensor::shape_str(x.shape()));
  residual_ = shortcut.data();
  try {
    forward(x, ctx);
  } catch (...) {
    residual_ = nullptr;
    throw;
  }
  residual_ = nullptr;
  return y_;
}

const tensor::Tensor& BatchNorm::backward(const tensor::Tensor& dy, bool need_input_grad) {
  DTRAIN_CHECK(dy.shape() == y_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from output shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(y_.shape()));
  const std::int64_t batch = dy.dim(0);
  const std::int64_t plane = plane_size(dy.shape());
  const float* g = dy.data();
  const float* xd = x_.data();
  sum_dy_.assign(static_cast<std::size_t>(features_), 0.0);
  sum_dy_xhat_.assign(static_cast<std::size_t>(features_), 0.0);
  const bool train = mode_ == Mode::kTrain;
  if (need_input_grad) dx_.ensure_shape(dy.shape());
  float* dx = dx_.data();
  const float* gamma = gamma_.data();
  const float* beta = beta_.data();
  const double n = static_cast<double>(count_);
  const std::int64_t distance = prefetch_distance(plane);
  // xhat is recomputed from x (forward keeps no copy: one stream of B*C*H*W floats fewer
  // written there), and dy masked by the fused ReLU's recomputed output.
  const auto plane_norm = [&](std::int64_t c) {
    const auto i = static_cast<std::size_t>(c);
    return PlaneNorm{mean_[i], inv_std_[i], gamma[c], beta[c], relu_};
  };
  // dx of channel c from its sums (global ones in a synchronized batch norm).
  const auto channel_dx = [&](std::int64_t c) {
    const auto i = static_cast<std::size_t>(c);
    const float scale = gamma[c] * inv_std_[i];
    // In eval mode mean and var are constants: dx = scale * dy.
    const float mean_dy = train ? static_cast<float>(sum_dy_[i] / n) : 0.0f;
    const float mean_dy_xhat = train ? static_cast<float>(sum_dy_xhat_[i] / n) : 0.0f;
    const PlaneNorm k = plane_norm(c);
    // Last image first, as normalize_channel in forward (elementwise: the order changes no bits).
    for (std::int64_t b = batch - 1; b >= 0; --b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      const std::int64_t ahead = ((b >= distance ? b - distance : b) * features_ + c) * plane;
      batch_norm_dx_plane(xd + offset, g + offset, dx + offset, plane, k, scale, mean_dy,
                          mean_dy_xhat, xd + ahead, g + ahead);
    }
  };
  // Without a reducer no channel waits for other ranks' sums, so each channel's dx follows its own
  // sums while its values (B*H*W floats of dy and of x: 800 KB at a ResNet's first stage at
  // batch 128) are still in L2, instead of a second pass over the whole tensor from memory.
  const bool dx_with_sums = need_input_grad && (!train || reducer_ == nullptr);
  for_each_channel(features_, batch * plane, [&](std::int64_t c) {
    PlaneSums sums;
    const PlaneNorm k = plane_norm(c);
    for (std::int64_t b = 0; b < batch; ++b) {
      const std::int64_t offset = (b * features_ + c) * plane;
      const std::int64_t ahead =
          ((b + distance < batch ? b + distance : b) * features_ + c) * plane;
      sums.add_sum_and_products(xd + offset, g + offset, plane, k, xd + ahead, g + ahead);
    }
    sums.totals(sum_dy_[static_cast<std::size_t>(c)], sum_dy_xhat_[static_cast<std::size_t>(c)]);
    if (dx_with_sums) channel_dx(c);
  });
  float* dgamma = gamma_grad_.data();
  float* dbeta = beta_grad_.data();
  for (std::int64_t c = 0; c < features_; ++c) {
    dgamma[c] += static_cast<float>(sum_dy_xhat_[static_cast<std::size_t>(c)]);
    dbeta[c] += static_cast<float>(sum_dy_[static_cast<std::size_t>(c)]);
  }
  if (!need_input_grad) return none_;
  if (dx_with_sums) return dx_;

  reducer_->reduce_gradient_sums(sum_dy_, sum_dy_xhat_);
  for_each_channel(features_, batch * plane, channel_dx);
  return dx_;
}

void GroupBatchNormReducer::reduce_statistics(ChannelStats& stats) {
  // (sum (F), sum_sq (F), count): one allreduce. The count is exact in a double up to 2^53.
  const std::size_t f = stats.sum.size();
  buffer_.resize(2 * f + 1);
  std::copy(stats.sum.begin(), stats.sum.end(), buffer_.begin());
  std::copy(stats.sum_sq.begin(), stats.sum_sq.end(), buffer_.begin() + static_cast<long>(f));
  buffer_[2 * f] = static_cast<double>(stats.count);
  group_.allreduce_sum(buffer_.data(), static_cast<std::int64_t>(buffer_.size()));
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), stats.sum.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.begin() + static_cast<long>(2 * f),
            stats.sum_sq.begin());
  stats.count = static_cast<std::int64_t>(buffer_[2 * f]);
}

void GroupBatchNormReducer::reduce_gradient_sums(std::vector<double>& sum_dy,
                                                 std::vector<double>& sum_dy_xhat) {
  const std::size_t f = sum_dy.size();
  buffer_.resize(2 * f);
  std::copy(sum_dy.begin(), sum_dy.end(), buffer_.begin());
  std::copy(sum_dy_xhat.begin(), sum_dy_xhat.end(), buffer_.begin() + static_cast<long>(f));
  group_.allreduce_sum(buffer_.data(), static_cast<std::int64_t>(buffer_.size()));
  std::copy(buffer_.begin(), buffer_.begin() + static_cast<long>(f), sum_dy.begin());
  std::copy(buffer_.begin() + static_cast<long>(f), buffer_.end(), sum_dy_xhat.begin());
}

std::unique_ptr<Layer> BatchNorm::clone() const {
  auto copy = std::make_unique<BatchNorm>(name(), features_, momentum_, eps_);
  copy->reducer_ = reducer_;  // a synchronized batch norm stays synchronized in every slot
  copy->relu_ = relu_;
  return copy;
}

}  // namespace dtrain::nn
