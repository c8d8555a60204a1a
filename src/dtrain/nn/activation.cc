#include "dtrain/nn/activation.h"

#include <cmath>
#include <numbers>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/nn/fast_math.h"

namespace dtrain::nn {
namespace {

// One functor per kind with value(x) and grad(x, y) (y = value(x), for kinds whose derivative is
// cheapest from the output). The dispatch on the kind happens once per pass, outside the loop, so
// each loop is a straight-line body the compiler can vectorise.
struct Sigmoid {
  float value(float x) const {
    // e^-|x| never overflows; the two branches are the same function.
    const float e = std::exp(-std::fabs(x));
    return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
  }
  float grad(float /*x*/, float y) const { return y * (1.0f - y); }
};

struct Tanh {
  float value(float x) const { return std::tanh(x); }
  float grad(float /*x*/, float y) const { return 1.0f - y * y; }
};

struct Relu {
  float value(float x) const { return x > 0.0f ? x : 0.0f; }
  float grad(float x, float /*y*/) const { return x > 0.0f ? 1.0f : 0.0f; }
};

struct Softplus {
  float value(float x) const { return std::fmax(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))); }
  float grad(float x, float /*y*/) const { return Sigmoid{}.value(x); }
};

struct LeakyRelu {
  float alpha;
  float value(float x) const { return x > 0.0f ? x : alpha * x; }
  float grad(float x, float /*y*/) const { return x > 0.0f ? 1.0f : alpha; }
};

struct Elu {
  float alpha;
  float value(float x) const { return x > 0.0f ? x : alpha * std::expm1(x); }
  float grad(float x, float /*y*/) const { return x > 0.0f ? 1.0f : alpha * std::exp(x); }
};

// fast_erf and fast_exp (fast_math.h, within 4e-7 of erf and exp) rather than std::erf and
// std::exp: libm's are scalar calls, these vectorise, and the transformer's MLP runs GELU over
// 4 x d_model values per token and layer.
struct Gelu {
  static constexpr float kInvSqrt2 = static_cast<float>(1.0 / std::numbers::sqrt2);
  static constexpr float kInvSqrt2Pi =
      static_cast<float>(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
  float value(float x) const { return 0.5f * x * (1.0f + fast_erf(x * kInvSqrt2)); }
  float grad(float x, float /*y*/) const {
    const float cdf = 0.5f * (1.0f + fast_erf(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * fast_exp(-0.5f * x * x);
    // An explicit fma: left to the compiler, the vectorised body and the scalar tail of a slice
    // may contract it differently, and a thread split would change the bits.
    return std::fma(x, pdf, cdf);
  }
};

template <typename F>
void forward_range(const F& f, const float* x, float* y, std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) y[i] = f.value(x[i]);
}

template <typename F>
void backward_range(const F& f, const float* x, const float* y, const float* dy, float* dx,
                    std::int64_t begin, std::int64_t end) {
  for (std::int64_t i = begin; i < end; ++i) dx[i] = dy[i] * f.grad(x[i], y[i]);
}

// Calls body(functor) with the functor of `kind`.
template <typename Body>
void dispatch(ActivationKind kind, float alpha, const Body& body) {
  switch (kind) {
    case ActivationKind::kSigmoid: return body(Sigmoid{});
    case ActivationKind::kTanh: return body(Tanh{});
    case ActivationKind::kRelu: return body(Relu{});
    case ActivationKind::kSoftplus: return body(Softplus{});
    case ActivationKind::kLeakyRelu: return body(LeakyRelu{alpha});
    case ActivationKind::kElu: return body(Elu{alpha});
    case ActivationKind::kGelu: return body(Gelu{});
  }
  throw InternalError(fmt::format("Activation: bad ActivationKind {}", static_cast<int>(kind)));
}

}  // namespace

ActivationKind parse_activation(std::string_view name) {
  if (name == "sigmoid") return ActivationKind::kSigmoid;
  if (name == "tanh") return ActivationKind::kTanh;
  if (name == "relu") return ActivationKind::kRelu;
  if (name == "softplus") return ActivationKind::kSoftplus;
  if (name == "leaky_relu") return ActivationKind::kLeakyRelu;
  if (name == "elu") return ActivationKind::kElu;
  if (name == "gelu") return ActivationKind::kGelu;
  throw ConfigError(fmt::format(
      "model.activation: unknown activation '{}'; accepted: sigmoid, tanh, relu, softplus, "
      "leaky_relu, elu, gelu",
      name));
}

std::string_view activation_name(ActivationKind kind) {
  switch (kind) {
    case ActivationKind::kSigmoid: return "sigmoid";
    case ActivationKind::kTanh: return "tanh";
    case ActivationKind::kRelu: return "relu";
    case ActivationKind::kSoftplus: return "softplus";
    case ActivationKind::kLeakyRelu: return "leaky_relu";
    case ActivationKind::kElu: return "elu";
    case ActivationKind::kGelu: return "gelu";
  }
  throw InternalError(
      fmt::format("activation_name: bad ActivationKind {}", static_cast<int>(kind)));
}

Activation::Activation(std::string name, ActivationKind kind, float alpha)
    : Layer(std::move(name)), kind_(kind), alpha_(alpha) {
  activation_name(kind_);  // rejects a kind cast from a bad integer
  if (!std::isfinite(alpha_)) {
    throw ConfigError(fmt::format("layer {}: model.activation_alpha must be finite, got {}",
                                  this->name(), alpha_));
  }
}

std::string Activation::describe() const {
  if (kind_ == ActivationKind::kLeakyRelu || kind_ == ActivationKind::kElu) {
    return fmt::format("Activation({}, alpha={})", activation_name(kind_), alpha_);
  }
  return fmt::format("Activation({})", activation_name(kind_));
}

const tensor::Tensor& Activation::forward(const tensor::Tensor& x, const ForwardContext& /*ctx*/) {
  DTRAIN_CHECK(x.is_contiguous(), "layer {}: input must be contiguous", name());
  x_ = x;
  y_.ensure_shape(x.shape());
  const float* xd = x.data();
  float* yd = y_.data();
  dispatch(kind_, alpha_, [&](const auto& f) {
    compute_pool().parallel_for(
        x.numel(), kActivationGrain,
        [&](std::int64_t begin, std::int64_t end) { forward_range(f, xd, yd, begin, end); });
  });
  return y_;
}

const tensor::Tensor& Activation::backward(const tensor::Tensor& dy, bool need_input_grad) {
  if (!need_input_grad) return none_;
  DTRAIN_CHECK(dy.shape() == x_.shape() && dy.is_contiguous(),
               "layer {}: dy shape {} differs from input shape {}", name(),
               tensor::shape_str(dy.shape()), tensor::shape_str(x_.shape()));
  dx_.ensure_shape(x_.shape());
  const float* xd = x_.data();
  const float* yd = y_.data();
  const float* gd = dy.data();
  float* dxd = dx_.data();
  dispatch(kind_, alpha_, [&](const auto& f) {
    compute_pool().parallel_for(dy.numel(), kActivationGrain,
                                [&](std::int64_t begin, std::int64_t end) {
                                  backward_range(f, xd, yd, gd, dxd, begin, end);
                                });
  });
  return dx_;
}

std::unique_ptr<Layer> Activation::clone() const {
  return std::make_unique<Activation>(name(), kind_, alpha_);
}

}  // namespace dtrain::nn
