#include "dtrain/aggregate/attack.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::aggregate {
namespace {

// rng_stream purpose of the noise attack.
constexpr std::uint64_t kNoisePurpose = 0xA77A;
constexpr double kDefaultIpmEpsilon = 0.1;

const float* need(const float* buffer, const char* what, const std::string& attack) {
  if (buffer == nullptr) {
    throw ShapeError(fmt::format("attack '{}' needs {}, got none", attack, what));
  }
  return buffer;
}

// -c g or c g.
class Scaled final : public Attack {
 public:
  Scaled(std::string name, double factor) : name_(std::move(name)), factor_(factor) {}
  std::string name() const override { return name_; }
  bool needs_honest() const override { return false; }
  void apply(const AttackInput& input, std::int64_t d, float* out) const override {
    if (d == 0) return;
    const float* g = need(input.own, "this rank's gradient", name_);
    const auto c = static_cast<float>(factor_);
    for (std::int64_t j = 0; j < d; ++j) out[j] = c * g[j];
  }

 private:
  std::string name_;
  double factor_;
};

class Noise final : public Attack {
 public:
  Noise(double sigma, std::uint64_t seed) : sigma_(sigma), seed_(seed) {}
  std::string name() const override { return fmt::format("noise:{}", sigma_); }
  bool needs_honest() const override { return false; }
  void apply(const AttackInput& input, std::int64_t d, float* out) const override {
    Rng rng(seed_, rng_stream(kNoisePurpose, input.step, static_cast<std::uint64_t>(input.rank)));
    const auto sigma = static_cast<float>(sigma_);
    for (std::int64_t j = 0; j < d; ++j) out[j] = sigma * rng.normal();
  }

 private:
  double sigma_;
  std::uint64_t seed_;
};

// mean_j and (with std) the sample standard deviation of coordinate j of the honest gradients,
// or the statistics the caller gave.
struct Moments {
  double mean = 0.0;
  double std = 0.0;
};
Moments moments(const AttackInput& input, std::int64_t j, bool with_std) {
  Moments m;
  if (input.honest.empty()) {
    m.mean = input.honest_mean[j];
    if (with_std) m.std = input.honest_std[j];
    return m;
  }
  const double h = static_cast<double>(input.honest.size());
  for (const float* x : input.honest) m.mean += x[j];
  m.mean /= h;
  if (with_std && input.honest.size() > 1) {
    double squares = 0.0;
    for (const float* x : input.honest) squares += (x[j] - m.mean) * (x[j] - m.mean);
    m.std = std::sqrt(squares / (h - 1.0));
  }
  return m;
}

void check_honest(const AttackInput& input, bool with_std, const std::string& attack) {
  if (!input.honest.empty()) {
    for (const float* x : input.honest) need(x, "the honest gradients", attack);
    return;
  }
  need(input.honest_mean, "the honest gradients or their mean", attack);
  if (with_std) need(input.honest_std, "the honest gradients or their standard deviation", attack);
}

class Alie final : public Attack {
 public:
  explicit Alie(std::optional<double> z) : z_(z) {}
  std::string name() const override { return z_ ? fmt::format("alie:{}", *z_) : "alie"; }
  bool needs_honest() const override { return true; }
  void apply(const AttackInput& input, std::int64_t d, float* out) const override {
    if (d == 0) return;
    check_honest(input, true, name());
    const double z = z_ ? *z_ : alie_z(input.workers, input.byzantine);
    for (std::int64_t j = 0; j < d; ++j) {
      const Moments m = moments(input, j, true);
      out[j] = static_cast<float>(m.mean - z * m.std);
    }
  }

 private:
  std::optional<double> z_;
};

class Ipm final : public Attack {
 public:
  explicit Ipm(double epsilon) : epsilon_(epsilon) {}
  std::string name() const override { return fmt::format("ipm:{}", epsilon_); }
  bool needs_honest() const override { return true; }
  void apply(const AttackInput& input, std::int64_t d, float* out) const override {
    if (d == 0) return;
    check_honest(input, false, name());
    for (std::int64_t j = 0; j < d; ++j) {
      out[j] = static_cast<float>(-epsilon_ * moments(input, j, false).mean);
    }
  }

 private:
  double epsilon_;
};

[[noreturn]] void reject(std::string_view spec, std::string_view why) {
  throw ConfigError(fmt::format("attack '{}': {}; accepted: {}", spec, why, accepted_attacks()));
}

double parse_number(std::string_view spec, std::string_view value, std::string_view what) {
  double v = 0.0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(v)) {
    reject(spec, fmt::format("{} '{}' is not a number", what, value));
  }
  return v;
}

}  // namespace

double normal_quantile(double p) {
  DTRAIN_CHECK(p > 0.0 && p < 1.0, "normal_quantile({})", p);
  // Bisection on Phi(z) = erfc(-z / sqrt 2) / 2, which is increasing: 200 halvings of [-40, 40]
  // reach the spacing of doubles.
  double low = -40.0;
  double high = 40.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = (low + high) / 2.0;
    if (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p) {
      low = mid;
    } else {
      high = mid;
    }
  }
  return (low + high) / 2.0;
}

double alie_z(int workers, int byzantine) {
  const int s = workers / 2 + 1 - byzantine;  // floor(n/2 + 1) - f
  if (byzantine < 1 || s < 1) {
    throw ConfigError(
        fmt::format("attack 'alie' with n = {} workers and f = {} attackers: its z formula needs "
                    "1 <= f <= floor(n/2) = {} (or give z, as in alie:1.0)",
                    workers, byzantine, workers / 2));
  }
  return normal_quantile(static_cast<double>(workers - s) / workers);
}

std::string accepted_attacks() {
  return "signflip[:<c > 0>], scale:<c>, noise:<sigma > 0>, alie[:<z>], ipm[:<eps > 0>]";
}

std::unique_ptr<Attack> parse_attack(std::string_view spec, std::uint64_t seed) {
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const bool has_value = colon != std::string_view::npos;
  const std::string_view value = has_value ? spec.substr(colon + 1) : std::string_view();
  if (name == "signflip") {
    const double c = has_value ? parse_number(spec, value, "c") : 1.0;
    if (!(c > 0.0)) reject(spec, fmt::format("c {} must be > 0", c));
    return std::make_unique<Scaled>(has_value ? fmt::format("signflip:{}", c) : "signflip", -c);
  }
  if (name == "scale") {
    if (!has_value) reject(spec, "scale needs a factor, as in scale:-4");
    const double c = parse_number(spec, value, "c");
    return std::make_unique<Scaled>(fmt::format("scale:{}", c), c);
  }
  if (name == "noise") {
    if (!has_value) reject(spec, "noise needs sigma, as in noise:1");
    const double sigma = parse_number(spec, value, "sigma");
    if (!(sigma > 0.0)) reject(spec, fmt::format("sigma {} must be > 0", sigma));
    return std::make_unique<Noise>(sigma, seed);
  }
  if (name == "alie") {
    return std::make_unique<Alie>(has_value ? std::optional<double>(parse_number(spec, value, "z"))
                                            : std::nullopt);
  }
  if (name == "ipm") {
    const double epsilon = has_value ? parse_number(spec, value, "eps") : kDefaultIpmEpsilon;
    if (!(epsilon > 0.0)) reject(spec, fmt::format("eps {} must be > 0", epsilon));
    return std::make_unique<Ipm>(epsilon);
  }
  reject(spec, fmt::format("unknown attack '{}'", name));
}

}  // namespace dtrain::aggregate
