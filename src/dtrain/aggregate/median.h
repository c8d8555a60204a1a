// Coordinate-wise median (Yin et al. 2018): out_j = the median of x_1j .. x_nj, for even n the
// mean of the two middle values. Tolerates ceil(n/2) - 1 Byzantine inputs: while the honest ones
// are a majority, each out_j lies between two honest values of coordinate j.
//
// NaN counts as +infinity (a NaN input is an outlier, not a poison for the comparisons).
// Cost: O(n d): per coordinate, n values gathered into a scratch of n floats and nth_element
// (plus a max over the lower half for even n).
#pragma once

#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class Median final : public Aggregator {
 public:
  std::string name() const override { return "median"; }
  int tolerated(int n) const override { return (n - 1) / 2; }

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  std::vector<float> column_;
};

// Coordinate j of every input into `column` (n floats), NaN replaced by +infinity, so that
// nth_element sees a strict weak order.
void gather_column(Inputs inputs, std::int64_t j, std::vector<float>& column);

}  // namespace dtrain::aggregate
