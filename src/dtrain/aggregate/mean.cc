#include "dtrain/aggregate/mean.h"

namespace dtrain::aggregate {

void average_into(Inputs inputs, std::int64_t d, float* out, std::vector<double>& sum) {
  sum.assign(static_cast<std::size_t>(d), 0.0);
  for (const float* x : inputs) {
    for (std::int64_t j = 0; j < d; ++j) sum[static_cast<std::size_t>(j)] += x[j];
  }
  const double n = static_cast<double>(inputs.size());
  for (std::int64_t j = 0; j < d; ++j) {
    out[j] = static_cast<float>(sum[static_cast<std::size_t>(j)] / n);
  }
}

void Mean::run(Inputs inputs, std::int64_t d, float* out) { average_into(inputs, d, out, sum_); }

}  // namespace dtrain::aggregate
