// Centered clipping (Karimireddy et al. 2021): from a centre v, L iterations of
//   v <- v + (1/n) sum_i clip(x_i - v, tau),   clip(z, tau) = z min(1, tau / ||z||_2)
// and out = v. Each input pulls v by at most tau / n per iteration, so v moves at most tau per
// iteration and f Byzantine inputs by at most f tau / n; with tau large it is the mean after one
// iteration. The centre is kept between calls: each call starts from the previous aggregate (the
// paper's choice, with worker momentum making consecutive aggregates close), or from set_center();
// the first call starts from zero. tolerated(n) = ceil(n/2) - 1: the clipped pulls of a minority
// cannot outweigh those of the majority (the paper proves its rate for a small Byzantine fraction;
// docs/ROBUST.md).
//
// Automatic radius (`cclip:auto`): each iteration takes tau = the ceil(n/2)-th smallest of the n
// distances ||x_i - v|| (the lower median). While f < n/2 inputs are Byzantine, that order
// statistic lies between the (ceil(n/2) - f)-th and the ceil(n/2)-th smallest honest distance, so
// tau follows the honest spread (and the drift of the gradient since the previous centre) in the
// inputs' own units: a far input pulls by at most tau / n however far it is, at least half of
// the inputs are not clipped, and the rule is scale-free (c x_i from c v gives c out). A fixed tau
// is in absolute units and has to be retuned per model, batch size and learning rate. Extra cost:
// one nth_element over the n distances per iteration, O(n).
//
// An input whose distance to v is not finite (NaN or infinite coordinates) pulls with zero (and
// counts as +infinity for the automatic tau). Sums in double, in input order. Cost: 2 L n d (per
// iteration one pass for the n norms, one for the update); scratch and centre: 2 d doubles.
#pragma once

#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class CenteredClip final : public Aggregator {
 public:
  // tau > 0, or std::nullopt for the automatic tau (above); iterations >= 1 (InternalError
  // otherwise; parse_aggregator reports a user's value).
  explicit CenteredClip(std::optional<double> tau, int iterations = 1);
  std::string name() const override;
  int tolerated(int n) const override { return (n - 1) / 2; }

  // The centre the next call starts from (d floats; that call must have the same d).
  void set_center(std::span<const float> center);
  // The current centre: the last aggregate, or what set_center gave; empty before either.
  const std::vector<double>& center() const { return center_; }
  // The radius of the last iteration run: the fixed tau, or the automatic one (0 before a call).
  double last_tau() const { return last_tau_; }
  // The centre (d doubles; empty before the first call).
  std::vector<double> state() const override { return center_; }
  void load_state(std::span<const double> values) override;
  // Empty (no call yet) or d values.
  bool state_fits(std::span<const double> values, std::int64_t d) const override {
    return values.empty() || std::cmp_equal(values.size(), d);
  }

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  std::optional<double> tau_;  // nullopt: automatic
  int iterations_;
  double last_tau_ = 0.0;
  std::vector<double> center_;
  std::vector<double> pull_;
  std::vector<double> scale_;
  std::vector<double> distance_;
};

}  // namespace dtrain::aggregate
