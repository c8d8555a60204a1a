#include "dtrain/data/sparse_dataset.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::data {

SparseRow SparseDataset::row(std::int64_t i) const {
  const auto begin = static_cast<std::size_t>(row_offsets[static_cast<std::size_t>(i)]);
  const auto end = static_cast<std::size_t>(row_offsets[static_cast<std::size_t>(i) + 1]);
  return {std::span<const std::int32_t>(columns).subspan(begin, end - begin),
          std::span<const float>(values).subspan(begin, end - begin)};
}

void SparseDataset::add_row(std::span<const std::int32_t> row_columns,
                            std::span<const float> row_values, float label) {
  DTRAIN_CHECK_EQ(row_columns.size(), row_values.size());
  for (std::size_t p = 0; p < row_columns.size(); ++p) {
    DTRAIN_CHECK(row_columns[p] >= 0 && row_columns[p] < num_features &&
                     (p == 0 || row_columns[p - 1] < row_columns[p]),
                 "{}: sample {} column {} (entry {}) of {} features", name, size(), row_columns[p],
                 p, num_features);
  }
  columns.insert(columns.end(), row_columns.begin(), row_columns.end());
  values.insert(values.end(), row_values.begin(), row_values.end());
  row_offsets.push_back(static_cast<std::int64_t>(columns.size()));
  labels.push_back(label);
}

void check_sparse_dataset(const SparseDataset& data) {
  DTRAIN_CHECK_EQ(data.row_offsets.size(), data.labels.size() + 1);
  DTRAIN_CHECK_EQ(data.columns.size(), data.values.size());
  DTRAIN_CHECK_EQ(data.row_offsets.front(), 0);
  DTRAIN_CHECK_EQ(data.row_offsets.back(), data.nnz());
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const auto begin = data.row_offsets[static_cast<std::size_t>(i)];
    const auto end = data.row_offsets[static_cast<std::size_t>(i) + 1];
    DTRAIN_CHECK(begin <= end, "{}: sample {} has offsets {} > {}", data.name, i, begin, end);
    for (auto p = begin; p < end; ++p) {
      const std::int32_t column = data.columns[static_cast<std::size_t>(p)];
      DTRAIN_CHECK(column >= 0 && column < data.num_features &&
                       (p == begin || data.columns[static_cast<std::size_t>(p) - 1] < column),
                   "{}: sample {} has column {} (features {}, columns must increase)", data.name, i,
                   column, data.num_features);
    }
  }
}

void make_binary_labels(SparseDataset& data, const SparseDataset& reference) {
  std::vector<float> present;
  for (float label : reference.labels) {
    if (std::find(present.begin(), present.end(), label) == present.end()) {
      present.push_back(label);
      if (present.size() > 2) break;
    }
  }
  std::sort(present.begin(), present.end());
  auto subset_of = [&](float a, float b) {
    return std::all_of(present.begin(), present.end(), [&](float v) { return v == a || v == b; });
  };
  if (present.size() > 2) {
    throw DataError(fmt::format(
        "{} has more than two label values ({}, {}, {}, ...); logistic and svm are binary "
        "classifiers: relabel the file to two classes (e.g. +1 for one class, -1 for the rest)",
        reference.name, present[0], present[1], present[2]));
  }
  float negative = -1.0f;
  float positive = 1.0f;
  if (subset_of(-1.0f, 1.0f)) {
    // Already -1 / +1.
  } else if (subset_of(0.0f, 1.0f)) {
    negative = 0.0f;
  } else if (present.size() == 2) {
    negative = present[0];
    positive = present[1];
  } else {
    throw DataError(fmt::format(
        "{} has a single label value {}; a binary classifier needs two classes (labels -1/+1, "
        "0/1 or two class ids)",
        reference.name, present.empty() ? 0.0f : present[0]));
  }
  for (std::size_t i = 0; i < data.labels.size(); ++i) {
    const float label = data.labels[i];
    if (label == positive) {
      data.labels[i] = 1.0f;
    } else if (label == negative) {
      data.labels[i] = -1.0f;
    } else {
      throw DataError(fmt::format(
          "{}: sample {} has label {}, but the training labels are {} and {}; use the same two "
          "label values in both files",
          data.name, i + 1, label, negative, positive));
    }
  }
}

SparseDataset take_first_rows(const SparseDataset& data, std::int64_t n) {
  if (n <= 0 || n >= data.size()) return data;
  SparseDataset out;
  out.name = data.name;
  out.num_features = data.num_features;
  const auto count = static_cast<std::size_t>(n);
  const auto nnz = static_cast<std::size_t>(data.row_offsets[count]);
  out.row_offsets.assign(data.row_offsets.begin(), data.row_offsets.begin() + n + 1);
  out.columns.assign(data.columns.begin(), data.columns.begin() + static_cast<std::ptrdiff_t>(nnz));
  out.values.assign(data.values.begin(), data.values.begin() + static_cast<std::ptrdiff_t>(nnz));
  out.labels.assign(data.labels.begin(), data.labels.begin() + n);
  return out;
}

}  // namespace dtrain::data
