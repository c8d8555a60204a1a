#include "dtrain/nn/dropout.h"

#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/base/thread_pool.h"

namespace dtrain::nn {
namespace {

// Element-wise slices of at least this many elements per thread.
constexpr std::int64_t kDropoutGrain = 16384;

// FNV-1a: a stable 64-bit hash of the layer name (std::hash may differ between builds).
std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t hash = 0xCBF29CE484222325ull;
  for (const char c : text) {
    hash ^= static_cast<std::uint8_t>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

}  // namespace

Dropout::Dropout(std::string name, float p)
    : Layer(std::move(name)), p_(p), name_hash_(fnv1a(this->name())) {
  if (!(p_ >= 0.0f && p_ < 1.0f)) {
    throw ConfigError(fmt::format(
        "layer {}: dropout probability {} out of range [0, 1); set model.dropout to e.g. 0.5",
        this->name(), p_));
  }
}

std::string Dropout::describe() const { return fmt::format("Dropout(p={})", p_); }

const tensor::Tensor& Dropout::forward(const tensor::Tensor& x, const ForwardContext& ctx) {
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  identity_ = ctx.mode == Mode::kEval || p_ == 0.0f;
  if (identity_) {
    passthrough_ = x;
    return passthrough_;
  }
  mask_.ensure_shape(x.shape());
  y_.ensure_shape(x.shape());
  // Keep when the 32-bit word u >= p * 2^32, i.e. with probability 1 - p (to 2^-32).
  const auto threshold = static_cast<std::uint64_t>(std::ldexp(static_cast<double>(p_), 32));
  const float scale = 1.0f / (1.0f - p_);
  const std::uint64_t stream =
      rng_stream(kDropoutStreamPurpose, static_cast<std::uint64_t>(ctx.step), name_hash_);
  const float* xd = x.data();
  float* md = mask_.data();
  float* yd = y_.data();
  compute_pool().parallel_for(x.numel(), kDropoutGrain, [&](std::int64_t begin, std::int64_t end) {
    Rng rng(ctx.seed, stream);
    rng.seek(static_cast<std::uint64_t>(begin));  // word i belongs to element i
    for (std::int64_t i = begin; i < end; ++i) {
      md[i] = rng.next_u32() >= threshold ? scale : 0.0f;
      yd[i] = xd[i] * md[i];
    }
  });
  return y_;
}

const tensor::Tensor& Dropout::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  if (identity_) {
    passthrough_ = dy;
    return passthrough_;
  }
  DTRAIN_CHECK(dy.shape() == mask_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from input shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(mask_.shape()));
  dx_.ensure_shape(dy.shape());
  const float* gd = dy.data();
  const float* md = mask_.data();
  float* dxd = dx_.data();
  compute_pool().parallel_for(dy.numel(), kDropoutGrain, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) dxd[i] = gd[i] * md[i];
  });
  return dx_;
}

std::unique_ptr<Layer> Dropout::clone() const { return std::make_unique<Dropout>(name(), p_); }

}  // namespace dtrain::nn
