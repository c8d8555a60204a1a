#include "dtrain/aggregate/krum.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "dtrain/aggregate/mean.h"
#include "dtrain/base/error.h"

namespace dtrain::aggregate {
namespace {

double squared_distance(const float* a, const float* b, std::int64_t d) {
  double sum = 0.0;
  for (std::int64_t k = 0; k < d; ++k) {
    const double diff = static_cast<double>(a[k]) - b[k];
    sum += diff * diff;
  }
  return std::isnan(sum) ? std::numeric_limits<double>::infinity() : sum;
}

}  // namespace

Krum::Krum(int byzantine, int m, bool multi) : byzantine_(byzantine), m_(m), multi_(multi) {
  DTRAIN_CHECK(byzantine >= 0 && m >= 0 && (multi || m == 1), "Krum(f = {}, m = {}, multi = {})",
               byzantine, m, multi);
}

std::string Krum::name() const {
  if (!multi_) return "krum";
  return m_ == 0 ? std::string("multikrum") : fmt::format("multikrum:{}", m_);
}

void Krum::check_inputs(int n) const {
  if (n <= 2 * byzantine_ + 2) {
    throw ConfigError(fmt::format(
        "aggregator '{}' with f = {} Byzantine inputs needs n > 2f + 2 = {} inputs, got n = {}",
        name(), byzantine_, 2 * byzantine_ + 2, n));
  }
  if (m_ > n) {
    throw ConfigError(
        fmt::format("aggregator '{}': averages m = {} inputs but there are n = {}", name(), m_, n));
  }
}

void Krum::run(Inputs inputs, std::int64_t d, float* out) {
  const int n = static_cast<int>(inputs.size());
  const auto un = static_cast<std::size_t>(n);
  distances_.assign(un * un, 0.0);
  for (std::size_t i = 0; i < un; ++i) {
    for (std::size_t j = i + 1; j < un; ++j) {
      distances_[i * un + j] = distances_[j * un + i] = squared_distance(inputs[i], inputs[j], d);
    }
  }
  const auto closest = static_cast<std::ptrdiff_t>(n - byzantine_ - 2);  // >= 1 (check_inputs)
  scores_.assign(un, 0.0);
  for (std::size_t i = 0; i < un; ++i) {
    row_.clear();
    for (std::size_t j = 0; j < un; ++j) {
      if (j != i) row_.push_back(distances_[i * un + j]);
    }
    std::sort(row_.begin(), row_.end());
    scores_[i] = std::accumulate(row_.begin(), row_.begin() + closest, 0.0);
  }
  std::vector<int> order(un);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return scores_[static_cast<std::size_t>(a)] < scores_[static_cast<std::size_t>(b)];
  });
  const int m = !multi_ ? 1 : (m_ == 0 ? n - byzantine_ : m_);
  selected_.assign(order.begin(), order.begin() + m);
  if (m == 1) {
    const float* best = inputs[static_cast<std::size_t>(selected_[0])];
    if (best != out) std::copy_n(best, d, out);
    return;
  }
  std::vector<int> by_index = selected_;
  std::sort(by_index.begin(), by_index.end());
  chosen_.clear();
  for (const int i : by_index) chosen_.push_back(inputs[static_cast<std::size_t>(i)]);
  average_into(chosen_, d, out, sum_);
}

}  // namespace dtrain::aggregate
