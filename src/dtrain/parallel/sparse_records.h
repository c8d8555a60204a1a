// A sparse data set's samples as one record per sample, laid out for SGD in random order (what
// Hogwild! trains on; internal to parallel/).
//
// data::SparseDataset is CSR: a sample's label, its two offsets, its columns and its values sit in
// four arrays, so visiting samples in random order touches ~6.5 cache lines per sample at k = 20
// non-zeros (offsets 1, label 1, columns and values 80 bytes each at a random alignment: 2.25
// lines each). Here sample i is one record at a 64-byte boundary,
//   entry 0          {count, label}      count = k (int32), label = y (float)
//   entries 1 .. k   {column, value}     in CSR order (increasing columns)
// padded to whole lines, ceil((k + 1) / 8) of them (3 at k = 20), plus the line holding starts[i]:
// 4 lines per sample. Cost: 64 ceil((k + 1) / 8) + 8 bytes per sample (200 at k = 20, against 172
// in CSR) beside the CSR, built once in O(nnz).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "dtrain/data/sparse_dataset.h"

namespace dtrain::parallel {

struct SparseEntry {
  std::int32_t column;  // entry 0: the sample's non-zero count
  float value;          // entry 0: the sample's label
};
static_assert(sizeof(SparseEntry) == 8, "eight entries per 64-byte line");

class SparseRecords {
 public:
  static constexpr std::int64_t kEntriesPerLine = 8;

  // One record per sample of `data` (labels as they are). InternalError for a sample with more
  // than 2^31 - 1 entries.
  explicit SparseRecords(const data::SparseDataset& data);

  std::int64_t size() const { return static_cast<std::int64_t>(starts_.size()) - 1; }
  // Sample i's record: record[0] = {count, label}, record[1 .. count] its entries.
  const SparseEntry* record(std::int64_t i) const { return entries_.get() + starts_[i]; }
  // Entry offsets: sample i's record spans [starts()[i], starts()[i + 1]) of entries(), whole
  // lines; N + 1 values.
  const std::int64_t* starts() const { return starts_.data(); }
  const SparseEntry* entries() const { return entries_.get(); }

 private:
  struct Free {
    void operator()(SparseEntry* p) const { std::free(p); }
  };
  std::vector<std::int64_t> starts_;
  std::unique_ptr<SparseEntry[], Free> entries_;  // 64-byte aligned
};

}  // namespace dtrain::parallel
