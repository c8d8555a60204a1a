// The plain average, what allreduce computes: out = (1/n) sum_i x_i. No robustness: one input
// can move it anywhere (tolerates 0 Byzantine inputs).
//
// Sums in double, in input order, then rounds once: equal inputs give themselves back exactly.
// Cost: n d additions, one pass over each input; scratch: d doubles.
#pragma once

#include <vector>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

class Mean final : public Aggregator {
 public:
  std::string name() const override { return "mean"; }
  int tolerated(int) const override { return 0; }

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override;

 private:
  std::vector<double> sum_;
};

// out = (1/n) sum_i inputs[i] (d floats each) through `sum` (resized to d), summed in double in
// input order: what Mean, Multi-Krum's average and bucketing's bucket means share.
void average_into(Inputs inputs, std::int64_t d, float* out, std::vector<double>& sum);

}  // namespace dtrain::aggregate
