// Reproducible random test inputs (tests only).
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/base/rng.h"

namespace dtrain::testing {

// n values uniform in [-1, 1) from Philox stream `stream` of `seed`: the same on every machine.
inline std::vector<float> random_values(std::int64_t n, std::uint64_t seed,
                                        std::uint64_t stream = 11) {
  Rng rng(seed, stream);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = 2.0f * rng.uniform() - 1.0f;
  return v;
}

}  // namespace dtrain::testing
