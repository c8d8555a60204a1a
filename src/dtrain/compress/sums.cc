#include "dtrain/compress/sums.h"

#include <algorithm>
#include <cmath>

namespace dtrain::compress {
namespace {

constexpr int kLanes = 64;
constexpr std::int64_t kBlock = 1024;

template <typename Term>
double lane_sum(const float* x, std::int64_t n, Term term) {
  double totals[kLanes] = {};
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t count = std::min(kBlock, n - start);
    const float* b = x + start;
    float lanes[kLanes] = {};
    std::int64_t i = 0;
    for (; i + kLanes <= count; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) lanes[j] += term(b[i + j]);
    }
    for (int j = 0; i < count; ++i, ++j) lanes[j] += term(b[i]);
    for (int j = 0; j < kLanes; ++j) totals[j] += lanes[j];
  }
  double total = 0.0;
  for (double lane : totals) total += lane;
  return total;
}

}  // namespace

double sum_abs(const float* x, std::int64_t n) {
  return lane_sum(x, n, [](float v) { return std::fabs(v); });
}

double sum_squares(const float* x, std::int64_t n) {
  return lane_sum(x, n, [](float v) { return v * v; });
}

}  // namespace dtrain::compress
