// Coordinate-wise trimmed mean (Yin et al. 2018): per coordinate j, drop the b = floor(beta n)
// largest and the b smallest of x_1j .. x_nj and average the n - 2b left. beta in [0, 1/2)
// (beta = 0 is the mean). Tolerates b Byzantine inputs: at most b values per side are extreme.
//
// NaN counts as +infinity (trimmed with the largest). The kept values are summed in double in the
// order nth_element leaves them, which depends on the input order only in the last bit.
// Cost: O(n d): per coordinate, n values gathered into a scratch of n floats and two
// nth_element passes.
#pragma once

#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class TrimmedMean final : public Aggregator {
 public:
  // beta in [0, 0.5) (InternalError otherwise; parse_aggregator reports a user's value).
  explicit TrimmedMean(double beta);
  std::string name() const override;
  int tolerated(int n) const override { return trimmed(n); }
  // b = floor(beta n) values dropped at each end.
  int trimmed(int n) const;

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  double beta_;
  std::vector<float> column_;
};

}  // namespace dtrain::aggregate
