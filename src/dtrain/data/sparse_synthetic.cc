#include "dtrain/data/sparse_synthetic.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::data {
namespace {

// rng_stream purposes of the sparse synthetic data set.
constexpr std::uint64_t kWeightPurpose = 0x5A25'0001;
constexpr std::uint64_t kSamplePurpose = 0x5A25'0002;

void check_config(const SparseSyntheticConfig& config, std::int64_t first) {
  if (config.samples < 1) {
    throw ConfigError(
        fmt::format("sparse synthetic data: samples must be >= 1, got {}", config.samples));
  }
  if (config.features < 1 || config.features > std::numeric_limits<std::int32_t>::max()) {
    throw ConfigError(fmt::format(
        "sparse synthetic data: features must be in [1, 2^31 - 1], got {}", config.features));
  }
  if (config.nonzeros < 1 || config.nonzeros > config.features) {
    throw ConfigError(
        fmt::format("sparse synthetic data: nonzeros must be in [1, features = {}], got {}",
                    config.features, config.nonzeros));
  }
  if (!(config.label_noise >= 0.0 && config.label_noise <= 0.5)) {
    throw ConfigError(fmt::format("sparse synthetic data: label_noise must be in [0, 0.5], got {}",
                                  config.label_noise));
  }
  if (first < 0) {
    throw ConfigError(fmt::format("sparse synthetic data: first must be >= 0, got {}", first));
  }
}

}  // namespace

std::vector<float> sparse_synthetic_weights(const SparseSyntheticConfig& config) {
  check_config(config, 0);
  std::vector<float> w(static_cast<std::size_t>(config.features));
  Rng rng(config.seed, rng_stream(kWeightPurpose));
  for (float& value : w) value = rng.normal();
  return w;
}

SparseDataset make_sparse_synthetic(const SparseSyntheticConfig& config, std::int64_t first) {
  check_config(config, first);
  const std::vector<float> w = sparse_synthetic_weights(config);
  const std::int64_t d = config.features;
  const std::int64_t k = config.nonzeros;
  const float scale = 1.0f / std::sqrt(static_cast<float>(k));
  SparseDataset data;
  data.name = "sparse-synthetic";
  data.num_features = d;
  data.row_offsets.reserve(static_cast<std::size_t>(config.samples) + 1);
  data.columns.reserve(static_cast<std::size_t>(config.samples * k));
  data.values.reserve(static_cast<std::size_t>(config.samples * k));
  data.labels.reserve(static_cast<std::size_t>(config.samples));
  // chosen[j] marks feature j as picked for the current sample; reset after each sample, so the
  // scratch costs O(d) once and O(k) per sample.
  std::vector<std::uint8_t> chosen(static_cast<std::size_t>(d), 0);
  std::vector<std::int32_t> columns(static_cast<std::size_t>(k));
  std::vector<float> values(static_cast<std::size_t>(k));
  for (std::int64_t i = first; i < first + config.samples; ++i) {
    Rng rng(config.seed, rng_stream(kSamplePurpose, static_cast<std::uint64_t>(i)));
    // Floyd's algorithm: k distinct values of [0, d) with k draws.
    std::size_t count = 0;
    for (std::int64_t j = d - k; j < d; ++j) {
      auto pick = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(j + 1)));
      if (chosen[static_cast<std::size_t>(pick)] != 0) pick = j;
      chosen[static_cast<std::size_t>(pick)] = 1;
      columns[count++] = static_cast<std::int32_t>(pick);
    }
    std::sort(columns.begin(), columns.end());
    double margin = 0.0;
    for (std::size_t p = 0; p < columns.size(); ++p) {
      chosen[static_cast<std::size_t>(columns[p])] = 0;
      values[p] = rng.normal() * scale;
      margin += static_cast<double>(w[static_cast<std::size_t>(columns[p])]) * values[p];
    }
    float label = margin >= 0.0 ? 1.0f : -1.0f;
    if (config.label_noise > 0.0 && rng.uniform() < config.label_noise) label = -label;
    data.add_row(columns, values, label);
  }
  return data;
}

}  // namespace dtrain::data
