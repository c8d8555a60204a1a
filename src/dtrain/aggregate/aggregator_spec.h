// The aggregators by name (docs/ROBUST.md has the table):
//
//   mean                   the plain average (no robustness)
//   median                 coordinate-wise median
//   trimmed:<beta>         coordinate-wise trimmed mean, beta in [0, 0.5)
//   krum                   Krum, with f = the Byzantine count given separately
//   multikrum[:<m>]        Multi-Krum: the mean of the m best-scored inputs (default m = n - f)
//   cclip[:<tau>[:<L>]]    centered clipping, radius tau > 0 (default 10) or auto (each
//                          iteration's lower median of the inputs' distances to the centre),
//                          L >= 1 iterations per call (default 1, as in the authors' code)
//   bucket:<s>,<spec>      bucketing with buckets of s >= 1 in front of any of the above
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "dtrain/aggregate/aggregator.h"

namespace dtrain::aggregate {

// `byzantine` (f >= 0) is what Krum and Multi-Krum assume; `seed` drives bucketing's shuffles.
// Throws a one-line ConfigError naming the accepted values for an unknown name, a parameter out
// of range, or a missing or extra one.
std::unique_ptr<Aggregator> parse_aggregator(std::string_view spec, int byzantine,
                                             std::uint64_t seed = 0);

// "mean, median, trimmed:<beta in [0, 0.5)>, ...": the accepted values, for messages and --help.
std::string accepted_aggregators();

}  // namespace dtrain::aggregate
