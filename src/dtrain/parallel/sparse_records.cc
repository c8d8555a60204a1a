#include "dtrain/parallel/sparse_records.h"

#include <algorithm>
#include <limits>
#include <new>

#include "dtrain/base/error.h"

namespace dtrain::parallel {
namespace {

constexpr std::size_t kLineBytes = 64;

// Entries of a record with `count` non-zeros: the header and the entries, in whole lines.
std::int64_t record_entries(std::int64_t count) {
  constexpr std::int64_t line = SparseRecords::kEntriesPerLine;
  return (count + 1 + line - 1) / line * line;
}

}  // namespace

SparseRecords::SparseRecords(const data::SparseDataset& data)
    : starts_(static_cast<std::size_t>(data.size() + 1), 0) {
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const std::int64_t count = data.row_offsets[i + 1] - data.row_offsets[i];
    DTRAIN_CHECK(count <= std::numeric_limits<std::int32_t>::max(),
                 "{} sample {} has {} entries, more than a record holds", data.name, i, count);
    starts_[i + 1] = starts_[i] + record_entries(count);
  }
  const std::size_t bytes = std::max<std::size_t>(
      kLineBytes, static_cast<std::size_t>(starts_.back()) * sizeof(SparseEntry));
  entries_.reset(static_cast<SparseEntry*>(std::aligned_alloc(kLineBytes, bytes)));
  if (!entries_) throw std::bad_alloc();
  for (std::int64_t i = 0; i < data.size(); ++i) {
    const data::SparseRow row = data.row(i);
    SparseEntry* out = entries_.get() + starts_[i];
    const auto count = static_cast<std::int64_t>(row.columns.size());
    out[0] = {static_cast<std::int32_t>(count), data.labels[static_cast<std::size_t>(i)]};
    for (std::int64_t p = 0; p < count; ++p) {
      out[1 + p] = {row.columns[static_cast<std::size_t>(p)],
                    row.values[static_cast<std::size_t>(p)]};
    }
    // The padding is never read, but a defined value keeps sanitizers and copies quiet.
    for (std::int64_t p = count + 1; p < starts_[i + 1] - starts_[i]; ++p) out[p] = {0, 0.0f};
  }
}

}  // namespace dtrain::parallel
