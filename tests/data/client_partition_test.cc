// Client partitions (data/client_partition.h): every sample lands with exactly one client; IID
// sizes differ by at most one; label shards give each client S single-label shards; a Dirichlet
// split's per-class shares follow Dir(alpha)'s mean and variance; all of them are pure functions
// of the seed; bad specs and impossible client counts are one-line errors with the numbers.
#include "dtrain/data/client_partition.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

using ::testing::HasSubstr;

// `classes` classes of `per_class` samples each, interleaved (label i % classes).
std::vector<std::int32_t> balanced_labels(std::int64_t classes, std::int64_t per_class) {
  std::vector<std::int32_t> labels(static_cast<std::size_t>(classes * per_class));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    labels[i] = static_cast<std::int32_t>(static_cast<std::int64_t>(i) % classes);
  }
  return labels;
}

void expect_exact_cover(const ClientPartition& partition, std::int64_t n) {
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (const auto& client : partition.clients) {
    EXPECT_TRUE(std::is_sorted(client.begin(), client.end()));
    for (const std::int64_t i : client) ++seen[static_cast<std::size_t>(i)];
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int c) { return c == 1; }));
}

TEST(ClientPartition, ParsesEveryForm) {
  EXPECT_EQ(parse_partition("iid").kind, PartitionKind::kIid);
  EXPECT_EQ(parse_partition("shards").shards_per_client, 2);
  EXPECT_EQ(parse_partition("shards:3").shards_per_client, 3);
  const PartitionSpec d = parse_partition("dirichlet:0.1");
  EXPECT_EQ(d.kind, PartitionKind::kDirichlet);
  EXPECT_DOUBLE_EQ(d.alpha, 0.1);
  EXPECT_EQ(partition_name(d), "dirichlet:0.1");
  EXPECT_EQ(partition_name(parse_partition("shards")), "shards:2");
}

TEST(ClientPartition, BadSpecsNameTheNumber) {
  try {
    parse_partition("dirichlet:0");
    FAIL() << "alpha = 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("alpha = 0 must be > 0"));
  }
  try {
    parse_partition("dirichlet:-0.5");
    FAIL() << "alpha < 0 accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("alpha = -0.5 must be > 0"));
  }
  EXPECT_THROW(parse_partition("dirichlet"), ConfigError);
  EXPECT_THROW(parse_partition("shards:0"), ConfigError);
  EXPECT_THROW(parse_partition("shards:x"), ConfigError);
  try {
    parse_partition("label-skew");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("accepted: iid, shards"));
  }
}

TEST(ClientPartition, MoreClientsThanSamplesIsAnErrorWithTheNumbers) {
  const auto labels = balanced_labels(2, 5);
  try {
    partition_clients(labels, 2, 11, parse_partition("iid"), 0);
    FAIL() << "11 clients over 10 samples accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("11 clients but the training set has 10 samples"));
  }
  EXPECT_THROW(partition_clients(labels, 2, 6, parse_partition("shards"), 0), ConfigError);
  EXPECT_NO_THROW(partition_clients(labels, 2, 10, parse_partition("iid"), 0));
}

TEST(ClientPartition, IidSizesDifferByAtMostOneAndCoverEverySample) {
  const auto labels = balanced_labels(10, 103);  // 1030 samples over 7 clients
  const ClientPartition p = partition_clients(labels, 10, 7, parse_partition("iid"), 5);
  expect_exact_cover(p, 1030);
  for (const std::int64_t size : p.sizes()) {
    EXPECT_TRUE(size == 1030 / 7 || size == 1030 / 7 + 1) << size;
  }
}

TEST(ClientPartition, SeededAndReproducible) {
  const auto labels = balanced_labels(10, 100);
  for (const char* spec : {"iid", "shards", "dirichlet:0.3"}) {
    const ClientPartition a = partition_clients(labels, 10, 20, parse_partition(spec), 11);
    const ClientPartition b = partition_clients(labels, 10, 20, parse_partition(spec), 11);
    const ClientPartition c = partition_clients(labels, 10, 20, parse_partition(spec), 12);
    EXPECT_EQ(a.clients, b.clients) << spec;
    EXPECT_NE(a.clients, c.clients) << spec;
    expect_exact_cover(a, 1000);
  }
}

// 10 classes x 60 samples over 30 clients: 60 shards of 10, each one label (sorted order), so
// every client holds exactly 20 samples of at most 2 classes, and each class's 60 samples are
// spread over 6 shards.
TEST(ClientPartition, ShardsGiveEachClientTwoSingleLabelShards) {
  const auto labels = balanced_labels(10, 60);
  const ClientPartition p = partition_clients(labels, 10, 30, parse_partition("shards"), 4);
  expect_exact_cover(p, 600);
  const auto histogram = label_histogram(p, labels, 10);
  std::vector<std::int64_t> per_class(10, 0);
  int two_class_clients = 0;
  for (const auto& row : histogram) {
    std::int64_t total = 0;
    int classes = 0;
    for (std::size_t c = 0; c < row.size(); ++c) {
      EXPECT_EQ(row[c] % 10, 0) << "a shard split across labels";
      total += row[c];
      classes += row[c] > 0 ? 1 : 0;
      per_class[c] += row[c];
    }
    EXPECT_EQ(total, 20);
    EXPECT_LE(classes, 2);
    two_class_clients += classes == 2 ? 1 : 0;
  }
  EXPECT_GT(two_class_clients, 15);  // most clients get two different classes
  for (const std::int64_t count : per_class) EXPECT_EQ(count, 60);
}

// Gamma(k, 1) has mean k and variance k.
TEST(ClientPartition, GammaVariatesHaveTheirMoments) {
  for (const double shape : {0.1, 0.5, 2.5}) {
    Rng rng(9, 1);
    const int n = 40000;
    double sum = 0.0, sum2 = 0.0;
    for (int i = 0; i < n; ++i) {
      const double g = gamma_variate(shape, rng);
      ASSERT_GE(g, 0.0);
      sum += g;
      sum2 += g * g;
    }
    const double mean = sum / n;
    const double variance = sum2 / n - mean * mean;
    EXPECT_NEAR(mean, shape, 0.03 * std::max(1.0, shape)) << shape;
    EXPECT_NEAR(variance, shape, 0.15 * std::max(0.2, shape)) << shape;
  }
}

// Dirichlet(alpha 1_K) shares: mean 1/K, variance (1/K)(1 - 1/K) / (K alpha + 1). 400 classes of
// 2000 samples over K = 5 clients: each class's cut is its p_c to within 1/2000.
TEST(ClientPartition, DirichletSharesFollowTheDistribution) {
  const std::int64_t classes = 400, per_class = 2000, k = 5;
  const auto labels = balanced_labels(classes, per_class);
  for (const double alpha : {0.1, 1.0}) {
    const ClientPartition p = partition_clients(
        labels, classes, k, parse_partition(fmt::format("dirichlet:{}", alpha)), 7);
    expect_exact_cover(p, classes * per_class);
    const auto histogram = label_histogram(p, labels, classes);
    double sum = 0.0, sum2 = 0.0;
    for (std::int64_t c = 0; c < classes; ++c) {
      std::int64_t column = 0;
      for (std::int64_t j = 0; j < k; ++j) {
        const double share =
            static_cast<double>(
                histogram[static_cast<std::size_t>(j)][static_cast<std::size_t>(c)]) /
            static_cast<double>(per_class);
        sum += share;
        sum2 += share * share;
        column += histogram[static_cast<std::size_t>(j)][static_cast<std::size_t>(c)];
      }
      EXPECT_EQ(column, per_class);
    }
    const double n = static_cast<double>(classes * k);
    const double mean = sum / n;
    const double variance = sum2 / n - mean * mean;
    const double expected = (1.0 / k) * (1.0 - 1.0 / k) / (static_cast<double>(k) * alpha + 1.0);
    EXPECT_NEAR(mean, 1.0 / k, 1e-12);
    EXPECT_NEAR(variance, expected, 0.15 * expected) << "alpha " << alpha;
  }
}

// Small alpha concentrates each client on few classes; a large one is nearly IID.
TEST(ClientPartition, DirichletAlphaControlsTheSkew) {
  const auto labels = balanced_labels(10, 600);
  auto top_class_share = [&](double alpha) {
    const ClientPartition p =
        partition_clients(labels, 10, 20, parse_partition(fmt::format("dirichlet:{}", alpha)), 3);
    double total = 0.0;
    for (const auto& row : label_histogram(p, labels, 10)) {
      std::int64_t all = 0;
      for (const std::int64_t v : row) all += v;
      total +=
          static_cast<double>(*std::max_element(row.begin(), row.end())) / static_cast<double>(all);
    }
    return total / 20.0;
  };
  EXPECT_GT(top_class_share(0.1), 0.5);
  EXPECT_LT(top_class_share(1000.0), 0.2);
}

}  // namespace
}  // namespace dtrain::data
