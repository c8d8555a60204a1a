// Properties every aggregator of the catalog must have: equal inputs come back unchanged; the
// order of the inputs does not matter to median, trimmed mean, Krum and Multi-Krum (inputs whose
// sums are exact, no ties); writing the aggregate over one of the inputs gives the same result.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "dtrain/aggregate/aggregator.h"
#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/base/rng.h"

namespace dtrain::aggregate {
namespace {

using Rows = std::vector<std::vector<float>>;

constexpr int kByzantine = 1;
const std::vector<std::string> kSpecs = {
    "mean",           "median",          "trimmed:0.2",   "trimmed:0",
    "krum",           "multikrum",       "multikrum:2",   "cclip",
    "cclip:0.5:3",    "bucket:2,median", "bucket:2,krum", "bucket:1,trimmed:0.3",
    "bucket:3,cclip", "cclip:auto",      "cclip:auto:2"};

std::vector<float> run(Aggregator& aggregator, const Rows& rows) {
  std::vector<const float*> inputs;
  for (const auto& row : rows) inputs.push_back(row.data());
  std::vector<float> out(rows[0].size(), -999.0f);
  aggregator.aggregate(inputs, static_cast<std::int64_t>(out.size()), out.data());
  return out;
}

// Small integers: every sum and squared distance of them is exact in float and double.
Rows integer_rows(int n, int d, std::uint64_t seed) {
  Rng rng(seed);
  Rows rows(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(d)));
  for (auto& row : rows) {
    for (float& x : row) x = static_cast<float>(static_cast<int>(rng.below(101)) - 50);
  }
  return rows;
}

TEST(AggregatorPropertiesTest, EqualInputsComeBackUnchanged) {
  const std::vector<float> x = {0.1f, -0.7f, 0.3333f, 1e-3f, -0.9f, 0.0f, 0.25f};  // |x| < 1
  for (const int n : {9, 10}) {  // bucket:2,krum with f = 1 needs 5 buckets
    const Rows rows(static_cast<std::size_t>(n), x);
    for (const std::string& spec : kSpecs) {
      // cclip:0.5 starts at 0 and moves 0.5 per iteration; 3 iterations reach |x| < 1.5.
      auto aggregator = parse_aggregator(spec, kByzantine, 11);
      EXPECT_EQ(run(*aggregator, rows), x) << spec << " n=" << n;
    }
  }
}

TEST(AggregatorPropertiesTest, InputOrderDoesNotMatterToMedianTrimmedMeanAndKrum) {
  for (const int n : {5, 8, 9}) {
    Rows rows = integer_rows(n, 31, static_cast<std::uint64_t>(n));
    for (const std::string spec :
         {"median", "trimmed:0.2", "trimmed:0.4", "krum", "multikrum", "multikrum:3", "mean"}) {
      auto aggregator = parse_aggregator(spec, kByzantine);
      const std::vector<float> want = run(*aggregator, rows);
      Rng rng(static_cast<std::uint64_t>(n) * 100);
      for (int trial = 0; trial < 5; ++trial) {
        Rows shuffled = rows;
        for (std::size_t i = shuffled.size() - 1; i > 0; --i) {
          std::swap(shuffled[i], shuffled[rng.below(i + 1)]);
        }
        EXPECT_EQ(run(*aggregator, shuffled), want) << spec << " n=" << n << " trial " << trial;
      }
    }
  }
}

TEST(AggregatorPropertiesTest, TheOutputMayBeOneOfTheInputs) {
  Rng rng(5);
  Rows rows(9, std::vector<float>(40));
  for (auto& row : rows) {
    for (float& v : row) v = rng.normal();
  }
  for (const std::string& spec : kSpecs) {
    auto separate = parse_aggregator(spec, kByzantine, 3);
    const std::vector<float> want = run(*separate, rows);
    for (const std::size_t target : {std::size_t{0}, std::size_t{4}}) {
      Rows copy = rows;
      std::vector<const float*> inputs;
      for (const auto& row : copy) inputs.push_back(row.data());
      auto fresh = parse_aggregator(spec, kByzantine, 3);
      fresh->aggregate(inputs, 40, copy[target].data());
      EXPECT_EQ(copy[target], want) << spec << " written over input " << target;
    }
  }
}

}  // namespace
}  // namespace dtrain::aggregate
