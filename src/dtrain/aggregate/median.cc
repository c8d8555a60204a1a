#include "dtrain/aggregate/median.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace dtrain::aggregate {

void gather_column(Inputs inputs, std::int64_t j, std::vector<float>& column) {
  column.resize(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const float v = inputs[i][j];
    column[i] = std::isnan(v) ? std::numeric_limits<float>::infinity() : v;
  }
}

void Median::run(Inputs inputs, std::int64_t d, float* out) {
  const std::size_t n = inputs.size();
  const auto middle = static_cast<std::ptrdiff_t>(n / 2);
  for (std::int64_t j = 0; j < d; ++j) {
    gather_column(inputs, j, column_);
    std::nth_element(column_.begin(), column_.begin() + middle, column_.end());
    const float upper = column_[static_cast<std::size_t>(middle)];
    if (n % 2 == 1) {
      out[j] = upper;
    } else {
      // The lower middle value is the largest of the lower half.
      const float lower = *std::max_element(column_.begin(), column_.begin() + middle);
      out[j] = static_cast<float>((static_cast<double>(lower) + upper) / 2.0);
    }
  }
}

}  // namespace dtrain::aggregate
