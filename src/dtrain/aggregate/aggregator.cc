#include "dtrain/aggregate/aggregator.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::aggregate {

void Aggregator::load_state(std::span<const double> values) {
  if (!values.empty()) {
    throw InternalError(
        fmt::format("aggregator '{}' keeps no state, given {} values", name(), values.size()));
  }
}

void Aggregator::check_inputs(int n) const {
  if (n < 1)
    throw ConfigError(fmt::format("aggregator '{}': {} inputs, needs at least 1", name(), n));
}

void Aggregator::aggregate(Inputs inputs, std::int64_t d, float* out) {
  check_inputs(static_cast<int>(inputs.size()));
  if (d < 0) throw ShapeError(fmt::format("aggregator '{}': length {} is negative", name(), d));
  if (d > 0) {
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      if (inputs[i] == nullptr) {
        throw ShapeError(fmt::format("aggregator '{}': input {} is null", name(), i));
      }
    }
    if (out == nullptr) throw ShapeError(fmt::format("aggregator '{}': null output", name()));
  }
  run(inputs, d, out);
}

void Aggregator::aggregate(const float* rows, int n, std::int64_t d, float* out) {
  row_pointers_.clear();
  for (int i = 0; i < n; ++i) row_pointers_.push_back(rows + static_cast<std::int64_t>(i) * d);
  aggregate(Inputs(row_pointers_), d, out);
}

}  // namespace dtrain::aggregate
