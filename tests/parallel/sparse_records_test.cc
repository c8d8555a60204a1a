// SparseRecords: every sample's record holds its count, label and entries in CSR order, starts at a
// 64-byte boundary and spans whole lines; empty samples and empty data sets work.
#include "dtrain/parallel/sparse_records.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace dtrain::parallel {
namespace {

data::SparseDataset sample_data() {
  data::SparseDataset data;
  data.name = "test";
  data.num_features = 100;
  std::vector<std::int32_t> columns;
  std::vector<float> values;
  // Rows of 0, 1, 7 (header + 7 = one full line), 8 (spills into a second line) and 20 entries.
  for (int count : {0, 1, 7, 8, 20}) {
    columns.clear();
    values.clear();
    for (int p = 0; p < count; ++p) {
      columns.push_back(3 * p + count % 3);
      values.push_back(0.5f * static_cast<float>(p) - static_cast<float>(count));
    }
    data.add_row(columns, values, count % 2 == 0 ? 1.0f : -1.0f);
  }
  return data;
}

TEST(SparseRecords, HoldEachSampleInWholeAlignedLines) {
  const data::SparseDataset data = sample_data();
  const SparseRecords records(data);
  ASSERT_EQ(records.size(), data.size());
  const std::vector<std::int64_t> lines = {1, 1, 1, 2, 3};
  for (std::int64_t i = 0; i < data.size(); ++i) {
    SCOPED_TRACE(testing::Message() << "sample " << i);
    const SparseEntry* record = records.record(i);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(record) % 64, 0u);
    EXPECT_EQ(records.starts()[i + 1] - records.starts()[i],
              lines[static_cast<std::size_t>(i)] * SparseRecords::kEntriesPerLine);
    const data::SparseRow row = data.row(i);
    ASSERT_EQ(record[0].column, static_cast<std::int32_t>(row.columns.size()));
    EXPECT_EQ(record[0].value, data.labels[static_cast<std::size_t>(i)]);
    for (std::size_t p = 0; p < row.columns.size(); ++p) {
      EXPECT_EQ(record[1 + p].column, row.columns[p]);
      EXPECT_EQ(record[1 + p].value, row.values[p]);
    }
  }
}

TEST(SparseRecords, AnEmptyDataSetHasNoRecords) {
  data::SparseDataset empty;
  empty.num_features = 4;
  const SparseRecords records(empty);
  EXPECT_EQ(records.size(), 0);
  EXPECT_EQ(records.starts()[0], 0);
}

}  // namespace
}  // namespace dtrain::parallel
