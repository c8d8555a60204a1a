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
// An input whose distance to v is not finite (NaN or infinite coordinates) pulls with zero.
// Sums in double, in input order. Cost: 2 L n d (per iteration one pass for the n norms, one for
// the update); scratch and centre: 2 d doubles.
#pragma once

#include <span>
#include <utility>
#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class CenteredClip final : public Aggregator {
 public:
  // tau > 0, iterations >= 1 (InternalError otherwise; parse_aggregator reports a user's value).
  explicit CenteredClip(double tau, int iterations = 1);
  std::string name() const override;
  int tolerated(int n) const override { return (n - 1) / 2; }

  // The centre the next call starts from (d floats; that call must have the same d).
  void set_center(std::span<const float> center);
  // The current centre: the last aggregate, or what set_center gave; empty before either.
  const std::vector<double>& center() const { return center_; }
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
  double tau_;
  int iterations_;
  std::vector<double> center_;
  std::vector<double> pull_;
  std::vector<double> scale_;
};

}  // namespace dtrain::aggregate
