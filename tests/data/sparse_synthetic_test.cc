// The sparse synthetic problem: labels are sign(w* . x) (recomputed here from w* and the stored
// samples), flipped at the configured rate with noise, k distinct sorted features per sample, and
// samples that depend only on (seed, index).
#include "dtrain/data/sparse_synthetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

double margin(const SparseDataset& data, const std::vector<float>& w, std::int64_t i) {
  const SparseRow row = data.row(i);
  double z = 0.0;
  for (std::size_t p = 0; p < row.columns.size(); ++p) {
    z += static_cast<double>(w[static_cast<std::size_t>(row.columns[p])]) * row.values[p];
  }
  return z;
}

TEST(SparseSynthetic, LabelsAgreeWithTheSeparatingVector) {
  SparseSyntheticConfig config;
  config.samples = 3000;
  config.features = 500;
  config.nonzeros = 7;
  config.seed = 11;
  const SparseDataset data = make_sparse_synthetic(config);
  const std::vector<float> w = sparse_synthetic_weights(config);
  ASSERT_EQ(data.size(), 3000);
  ASSERT_EQ(w.size(), 500u);
  EXPECT_EQ(data.num_features, 500);
  EXPECT_EQ(data.nnz(), 3000 * 7);
  check_sparse_dataset(data);  // columns distinct, increasing, in range
  std::int64_t positives = 0;
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const float expected = margin(data, w, i) >= 0.0 ? 1.0f : -1.0f;
    ASSERT_EQ(data.labels[static_cast<std::size_t>(i)], expected) << "sample " << i;
    positives += expected > 0.0f ? 1 : 0;
  }
  // Both classes about equally frequent (w* . x is symmetric around 0): 1500 +- 5 sigma (27).
  EXPECT_NEAR(static_cast<double>(positives), 1500.0, 140.0);
}

TEST(SparseSynthetic, ValuesHaveUnitNormOnAverage) {
  SparseSyntheticConfig config;
  config.samples = 2000;
  config.features = 1000;
  config.nonzeros = 16;
  const SparseDataset data = make_sparse_synthetic(config);
  double squares = 0.0;
  for (float v : data.values) squares += static_cast<double>(v) * v;
  // E ||x||^2 = k * (1 / k) = 1; the mean of 2000 has sd sqrt(2 / k / 2000) = 0.008.
  EXPECT_NEAR(squares / 2000.0, 1.0, 0.05);
}

TEST(SparseSynthetic, LabelNoiseFlipsTheConfiguredFraction) {
  SparseSyntheticConfig config;
  config.samples = 20000;
  config.features = 2000;
  config.nonzeros = 10;
  config.label_noise = 0.2;
  config.seed = 3;
  const SparseDataset data = make_sparse_synthetic(config);
  const std::vector<float> w = sparse_synthetic_weights(config);
  std::int64_t flipped = 0;
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const float clean = margin(data, w, i) >= 0.0 ? 1.0f : -1.0f;
    flipped += data.labels[static_cast<std::size_t>(i)] != clean ? 1 : 0;
  }
  // Binomial(20000, 0.2): mean 4000, sd 57; allow 5 sd.
  EXPECT_NEAR(static_cast<double>(flipped), 4000.0, 285.0);
}

TEST(SparseSynthetic, SamplesDependOnlyOnSeedAndIndex) {
  SparseSyntheticConfig config;
  config.samples = 50;
  config.features = 300;
  config.nonzeros = 5;
  config.seed = 9;
  const SparseDataset all = make_sparse_synthetic(config);
  EXPECT_EQ(make_sparse_synthetic(config).columns, all.columns);  // deterministic
  config.samples = 20;
  const SparseDataset tail = make_sparse_synthetic(config, 30);  // samples 30 .. 49
  for (std::int64_t i = 0; i < 20; ++i) {
    const SparseRow a = all.row(30 + i);
    const SparseRow b = tail.row(i);
    ASSERT_TRUE(std::equal(a.columns.begin(), a.columns.end(), b.columns.begin(), b.columns.end()));
    ASSERT_TRUE(std::equal(a.values.begin(), a.values.end(), b.values.begin(), b.values.end()));
    ASSERT_EQ(all.labels[static_cast<std::size_t>(30 + i)],
              tail.labels[static_cast<std::size_t>(i)]);
  }
  SparseSyntheticConfig other = config;
  other.seed = 10;
  EXPECT_NE(make_sparse_synthetic(other).columns, make_sparse_synthetic(config).columns);
}

TEST(SparseSynthetic, DenseCornerCaseUsesEveryFeature) {
  SparseSyntheticConfig config;
  config.samples = 4;
  config.features = 6;
  config.nonzeros = 6;  // k = d: Floyd's algorithm must return every feature
  const SparseDataset data = make_sparse_synthetic(config);
  for (std::int64_t i = 0; i < 4; ++i) {
    const SparseRow row = data.row(i);
    EXPECT_EQ(std::vector<std::int32_t>(row.columns.begin(), row.columns.end()),
              (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}));
  }
}

TEST(SparseSynthetic, RejectsBadConfigs) {
  auto bad = [](auto change) {
    SparseSyntheticConfig config;
    config.features = 10;
    config.nonzeros = 3;
    change(config);
    EXPECT_THROW(make_sparse_synthetic(config), ConfigError);
  };
  bad([](SparseSyntheticConfig& c) { c.samples = 0; });
  bad([](SparseSyntheticConfig& c) { c.features = 0; });
  bad([](SparseSyntheticConfig& c) { c.nonzeros = 11; });
  bad([](SparseSyntheticConfig& c) { c.nonzeros = 0; });
  bad([](SparseSyntheticConfig& c) { c.label_noise = 0.6; });
  bad([](SparseSyntheticConfig& c) { c.label_noise = std::nan(""); });
}

}  // namespace
}  // namespace dtrain::data
