#include "dtrain/train/statistics.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace dtrain::train {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const std::size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

double nearest_rank_quantile(std::vector<double> values, double q) {
  if (values.empty()) return 0.0;
  const auto rank =
      static_cast<std::size_t>(std::max(std::ceil(q * static_cast<double>(values.size())), 1.0));
  const auto at = values.begin() + static_cast<std::ptrdiff_t>(std::min(rank, values.size()) - 1);
  std::nth_element(values.begin(), at, values.end());
  return *at;
}

}  // namespace dtrain::train
