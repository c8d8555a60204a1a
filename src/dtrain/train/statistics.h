// Order statistics of measured durations and rates, as the run summaries, benchmarks and Hogwild!
// reports quote them.
#pragma once

#include <vector>

namespace dtrain::train {

// The median (the mean of the two middle values for an even count); 0 for none.
double median(std::vector<double> values);
// The q-quantile by nearest rank (the smallest value with at least q of the values at or below
// it; q in (0, 1]): a value that was measured, as p99 figures quote; 0 for none.
double nearest_rank_quantile(std::vector<double> values, double q);

}  // namespace dtrain::train
