// Byzantine attacks for robustness experiments (docs/ROBUST.md): what a Byzantine worker sends in
// place of its gradient. Raw buffers of d floats, like the aggregators.
//
//   signflip[:c]   -c g                      (c > 0, default 1)
//   scale:c        c g                       (any finite c)
//   noise:sigma    N(0, sigma^2) per coordinate, independent of g (Blanchard et al. 2017's
//                  Gaussian workers); a pure function of (seed, step, rank)
//   alie[:z]       mu_j - z sigma_j per coordinate ("a little is enough", Baruch et al. 2019), mu
//                  and sigma the mean and sample standard deviation of the honest gradients; z
//                  from the paper's formula for n workers and f attackers (alie_z) unless given
//   ipm[:eps]      -eps mean(honest) (inner-product manipulation, Xie et al. 2020; default eps
//                  0.1, the setting of Karimireddy et al. 2021)
//
// g is this rank's honest gradient. ALIE and IPM are omniscient: they need the honest gradients of
// the step (or their mean, and for ALIE their standard deviation). Label flipping changes a
// rank's data, not its gradient, and lives with the training loop. Cost: O(d), ALIE and IPM
// O(h d) over h honest gradients.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

struct AttackInput {
  // This rank's honest gradient (signflip, scale).
  const float* own = nullptr;
  // The honest gradients of the step (ALIE, IPM); or, when empty, their mean and (ALIE) their
  // standard deviation per coordinate below.
  Inputs honest;
  const float* honest_mean = nullptr;
  const float* honest_std = nullptr;
  // ALIE's z formula: n workers in all, f of them Byzantine.
  int workers = 0;
  int byzantine = 0;
  // Noise's random stream.
  std::uint64_t step = 0;
  int rank = 0;
};

class Attack {
 public:
  virtual ~Attack() = default;
  // The spec parse_attack turns into this attack ("alie", "ipm:0.5").
  virtual std::string name() const = 0;
  // Whether it needs the honest gradients of the step (or their statistics): ALIE and IPM.
  virtual bool needs_honest() const = 0;
  // out (d) = the Byzantine gradient. out may be input.own or one of input.honest. Throws
  // ShapeError when a buffer the attack needs is missing.
  virtual void apply(const AttackInput& input, std::int64_t d, float* out) const = 0;
};

// Baruch et al. 2019: s = floor(n/2 + 1) - f workers must be won over, and
// z = Phi^-1((n - s) / n) (Phi the standard normal CDF). ConfigError unless 1 <= f and s >= 1
// (f <= floor(n/2)).
double alie_z(int workers, int byzantine);

// The inverse of the standard normal CDF, p in (0, 1).
double normal_quantile(double p);

// One-line ConfigError naming the accepted values for an unknown name or a bad parameter.
// `seed`: noise's random numbers.
std::unique_ptr<Attack> parse_attack(std::string_view spec, std::uint64_t seed = 0);

std::string accepted_attacks();

}  // namespace dtrain::aggregate
