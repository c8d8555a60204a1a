#include "dtrain/aggregate/trimmed_mean.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "dtrain/aggregate/median.h"
#include "dtrain/base/error.h"

namespace dtrain::aggregate {

TrimmedMean::TrimmedMean(double beta) : beta_(beta) {
  DTRAIN_CHECK(beta >= 0.0 && beta < 0.5, "trimmed mean's beta {} outside [0, 0.5)", beta);
}

std::string TrimmedMean::name() const { return fmt::format("trimmed:{}", beta_); }

int TrimmedMean::trimmed(int n) const {
  return static_cast<int>(std::floor(beta_ * static_cast<double>(n)));
}

void TrimmedMean::run(Inputs inputs, std::int64_t d, float* out) {
  const int n = static_cast<int>(inputs.size());
  const int b = trimmed(n);  // 2b < n since beta < 1/2
  for (std::int64_t j = 0; j < d; ++j) {
    gather_column(inputs, j, column_);
    const auto first = column_.begin();
    // [0, b) the smallest, then [b, n - b) the kept values, then the b largest.
    if (b > 0) {
      std::nth_element(first, first + b, column_.end());
      std::nth_element(first + b, first + (n - b - 1), column_.end());
    }
    double sum = 0.0;
    for (int i = b; i < n - b; ++i) sum += column_[static_cast<std::size_t>(i)];
    out[j] = static_cast<float>(sum / (n - 2 * b));
  }
}

}  // namespace dtrain::aggregate
