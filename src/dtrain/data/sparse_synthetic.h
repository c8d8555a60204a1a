// A synthetic sparse binary classification problem with a known separating vector, for Hogwild!.
//
// Rule: w* in R^d has i.i.d. N(0, 1) elements. Sample i picks k distinct features uniformly from
// [0, d) (Floyd's algorithm), gives each the value N(0, 1) / sqrt(k) (so ||x_i|| is about 1 and a
// learning rate near 1 is stable), and takes the label y_i = +1 when w* . x_i >= 0, else -1; with
// probability label_noise the label is then flipped. Without noise w* separates the data (a
// linear model can reach 100% accuracy); with noise p the best accuracy is about 1 - p.
//
// Sparsity is what makes Hogwild! work: two concurrent updates touch a common feature with
// probability about k^2 / d (k = 20, d = 10^5: 0.4%), so the lock-free races are rare.
//
// Every sample and w* come from their own counter-based streams (base/rng.h) keyed by seed, so
// sample i does not depend on `samples` or `first`: samples [n, n + m) of one config are a test
// set disjoint from the training set [0, n) and drawn from the same w*.
#pragma once

#include <cstdint>
#include <vector>

#include "dtrain/data/sparse_dataset.h"

namespace dtrain::data {

struct SparseSyntheticConfig {
  std::int64_t samples = 10000;    // N
  std::int64_t features = 100000;  // d
  std::int64_t nonzeros = 20;      // k per sample, 1 <= k <= d
  double label_noise = 0.0;        // probability of a flipped label, in [0, 0.5]
  std::uint64_t seed = 0;
};

// Samples [first, first + samples) of the problem above, named "sparse-synthetic", labels -1 / +1.
// ConfigError for samples < 1, features < 1 or > 2^31 - 1, nonzeros outside [1, features], a
// negative first, or label_noise outside [0, 0.5]. Cost: O(samples * k log k) time; O(d) bytes of
// scratch.
SparseDataset make_sparse_synthetic(const SparseSyntheticConfig& config, std::int64_t first = 0);

// w*, d values.
std::vector<float> sparse_synthetic_weights(const SparseSyntheticConfig& config);

}  // namespace dtrain::data
