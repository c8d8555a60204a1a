// Loading what a run's data section names: one dispatch from a data set's name to its reader or
// generator, for the dense sets (every strategy) and the sparse ones (Hogwild!'s linear models).
// train::DataSection maps onto DataSpec (train/run_data.h); data/ knows no config file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/data/dataset.h"
#include "dtrain/data/sparse_dataset.h"

namespace dtrain::data {

// What to load; the meaning of each field is the [data] key of the same name (docs/CONFIG.md).
struct DataSpec {
  std::string dataset = "fashion-mnist";
  std::string path;
  std::string test_path;  // libsvm only
  std::int64_t sparse_features = 0;
  std::int64_t sparse_nonzeros = 0;
  double sparse_label_noise = 0.0;
  std::int64_t synthetic_samples = 0;
  std::int64_t synthetic_test_samples = 0;
  std::int64_t synthetic_classes = 0;
  std::vector<std::int64_t> synthetic_shape;
  double synthetic_noise = 0.0;
  std::int64_t synthetic_seed = 0;  // also the seed of text windows' offsets
  // text (data/text_corpus.h)
  std::int64_t block = 128;
  std::int64_t text_windows = 0;
  std::int64_t text_test_windows = 256;
  double text_holdout = 0.1;
  std::int64_t limit_train = 0;  // the first N samples (0 = all)
  std::int64_t limit_test = 0;
};

struct DenseSplits {
  Dataset train;
  Dataset test;
};

struct SparseSplits {
  SparseDataset train;
  std::optional<SparseDataset> test;  // none: libsvm without a test file
};

// True for the sparse sets (libsvm, sparse-synthetic).
bool is_sparse_dataset(const std::string& name);

// fashion-mnist / mnist: the IDX files in path; cifar10: the binary batches in path; text: windows
// of the bytes under path (data/text_corpus.h); synthetic:
// one draw of synthetic_samples + synthetic_test_samples split into train (the first
// synthetic_samples) and test (the rest), so both share the class means. Then limit_train /
// limit_test keep the first N samples. DataError from the readers names the missing or bad file;
// ConfigError for a name that is not a dense set.
DenseSplits load_dense(const DataSpec& spec);

// libsvm: path (and test_path when set), labels mapped to -1 / +1 by the training set's values;
// sparse-synthetic: synthetic_samples, then the next synthetic_test_samples of the same stream.
// Then the limits.
SparseSplits load_sparse(const DataSpec& spec);

// The first n samples of `dataset` (a copy), or all of it when n == 0 or n >= size.
Dataset take_first(const Dataset& dataset, std::int64_t n);

}  // namespace dtrain::data
