// Krum and Multi-Krum (Blanchard et al. 2017). With f of the n inputs Byzantine, input i's score is
// the sum of its squared distances to its n - f - 2 closest other inputs; Krum returns the input
// with the lowest score, Multi-Krum the average of the m lowest (m = n: the mean). Needs
// n > 2f + 2 (otherwise a ConfigError with the numbers). Tolerates the f it is given: the chosen
// input lies close to a cluster of n - f - 2 inputs, at least n - 2f - 2 >= 1 of them honest.
//
// Squared distances in double; a NaN distance counts as +infinity. Ties in score are broken by
// input index, the lower first; Multi-Krum sums its m inputs in index order.
// Cost: n(n - 1)/2 d multiply-adds for the pairwise distances (O(n^2 d)), then O(n^2 log n) for
// the scores; scratch: n^2 doubles.
#pragma once

#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class Krum final : public Aggregator {
 public:
  // Krum: Krum(f). Multi-Krum: Krum(f, m, true) with m >= 1, or m = 0 for m = n - f.
  explicit Krum(int byzantine, int m = 1, bool multi = false);
  std::string name() const override;
  int tolerated(int) const override { return byzantine_; }
  void check_inputs(int n) const override;

  // Of the last call: every input's score, and the inputs averaged (by score, then index).
  const std::vector<double>& scores() const { return scores_; }
  const std::vector<int>& selected() const { return selected_; }

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  int byzantine_;
  int m_;
  bool multi_;
  std::vector<double> distances_;  // (n, n)
  std::vector<double> scores_;
  std::vector<int> selected_;
  std::vector<double> row_;
  std::vector<const float*> chosen_;
  std::vector<double> sum_;
};

}  // namespace dtrain::aggregate
