// A sparse data set in compressed sparse row (CSR) form, for the linear models Hogwild! trains.
//
// N samples over d features with nnz stored values in all:
//   row_offsets  N + 1 offsets; sample i is the entries [row_offsets[i], row_offsets[i + 1])
//   columns      nnz feature indices, 0-based, strictly increasing within a sample, each < d
//   values       nnz feature values
//   labels       N labels: as read (libsvm) until make_binary_labels maps them to -1 / +1
// Memory: 8 (N + 1) + 8 nnz + 4 N bytes; a dense copy would take 4 N d. A sample's entries are
// contiguous, so a sparse dot product w . x_i reads 8 bytes per stored value plus the gathered
// w[columns[p]].
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace dtrain::data {

// One sample's stored entries.
struct SparseRow {
  std::span<const std::int32_t> columns;
  std::span<const float> values;
};

struct SparseDataset {
  std::string name;  // "libsvm <path>" or "sparse-synthetic": error messages name the data by it
  std::int64_t num_features = 0;             // d
  std::vector<std::int64_t> row_offsets{0};  // N + 1
  std::vector<std::int32_t> columns;         // nnz
  std::vector<float> values;                 // nnz
  std::vector<float> labels;                 // N

  // N.
  std::int64_t size() const { return static_cast<std::int64_t>(labels.size()); }
  std::int64_t nnz() const { return static_cast<std::int64_t>(columns.size()); }
  SparseRow row(std::int64_t i) const;
  // Appends a sample; columns must be increasing and < num_features (InternalError otherwise:
  // readers check their input before calling this).
  void add_row(std::span<const std::int32_t> row_columns, std::span<const float> row_values,
               float label);
};

// Checks the invariants above (offsets start at 0, increase and end at nnz; columns increasing
// and in [0, d); one label per sample); InternalError naming the first sample that breaks one.
void check_sparse_dataset(const SparseDataset& data);

// Maps labels to -1 / +1 for a binary classifier, by the values present in `reference` (the
// training set):
//   a subset of {-1, +1}    kept;
//   a subset of {0, 1}      0 -> -1, 1 -> +1;
//   any other two values    the smaller -> -1, the larger -> +1 (libsvm files such as
//                           breast-cancer use 2 and 4);
// and applies the same map to `data` (reference itself, or its test set). DataError naming the
// data set for more than two label values (a multi-class file) or a single value outside the
// sets above, and naming the sample of `data` whose label the map does not cover.
void make_binary_labels(SparseDataset& data, const SparseDataset& reference);
inline void make_binary_labels(SparseDataset& data) { make_binary_labels(data, data); }

// The first n samples (a copy), or all of them when n == 0 or n >= N; num_features is kept.
SparseDataset take_first_rows(const SparseDataset& data, std::int64_t n);

}  // namespace dtrain::data
