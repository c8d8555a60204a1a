// The libsvm reader: a checked-in file read into exact CSR arrays, raw and gzip round trips, label
// mapping to -1/+1, and every kind of malformed line giving a one-line DataError that names the
// file, the line number and the fault.
#include "dtrain/data/libsvm_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data_files.h"
#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

using fixture::data_error_of;
using fixture::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::uint8_t> bytes_of(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

TEST(LibsvmReader, ReadsTheCheckedInFileIntoCsr) {
  const std::string path = std::string(DTRAIN_TEST_DATA_DIR) + "/small.libsvm";
  const SparseDataset data = read_libsvm(path);
  EXPECT_EQ(data.size(), 4);
  EXPECT_EQ(data.num_features, 7);
  EXPECT_EQ(data.row_offsets, (std::vector<std::int64_t>{0, 3, 4, 7, 9}));
  EXPECT_EQ(data.columns, (std::vector<std::int32_t>{0, 2, 6, 1, 3, 4, 5, 0, 6}));
  EXPECT_EQ(data.values,
            (std::vector<float>{0.5f, -2.0f, 0.1f, 1.25f, 3.0f, 4.0f, 5.0f, 1.0f, 2.0f}));
  EXPECT_EQ(data.labels, (std::vector<float>{1.0f, -1.0f, 0.0f, -1.0f}));
  EXPECT_THAT(data.name, HasSubstr("small.libsvm"));
  check_sparse_dataset(data);
  const SparseRow row = data.row(2);
  ASSERT_EQ(row.columns.size(), 3u);
  EXPECT_EQ(row.columns[1], 4);
  EXPECT_EQ(row.values[2], 5.0f);
}

class LibsvmRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(LibsvmRoundTrip, RawAndGzipReadTheSame) {
  const bool gzip = GetParam();
  TempDir dir;
  const std::string path = dir.file(gzip ? "a.libsvm.gz" : "a.libsvm");
  fixture::write_file(path, bytes_of("2 3:1.5 10:-4\r\n4 1:2\r\n4\n"));
  const SparseDataset data = read_libsvm(path);
  EXPECT_EQ(data.size(), 3);
  EXPECT_EQ(data.num_features, 10);
  EXPECT_EQ(data.row_offsets, (std::vector<std::int64_t>{0, 2, 3, 3}));  // the last has no entry
  EXPECT_EQ(data.columns, (std::vector<std::int32_t>{2, 9, 0}));
  EXPECT_EQ(data.values, (std::vector<float>{1.5f, -4.0f, 2.0f}));
  EXPECT_EQ(data.labels, (std::vector<float>{2.0f, 4.0f, 4.0f}));
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, LibsvmRoundTrip, ::testing::Bool());

TEST(LibsvmReader, MinFeaturesWidensTheDataSet) {
  const SparseDataset data = parse_libsvm("1 2:1\n", "t", 50);
  EXPECT_EQ(data.num_features, 50);
  EXPECT_EQ(parse_libsvm("1 60:1\n", "t", 50).num_features, 60);
}

TEST(LibsvmReader, BinaryLabelsMapEveryConvention) {
  auto labels_after = [](const std::string& text) {
    SparseDataset data = parse_libsvm(text, "t");
    make_binary_labels(data);
    return data.labels;
  };
  EXPECT_EQ(labels_after("+1 1:1\n-1 1:1\n"), (std::vector<float>{1, -1}));
  EXPECT_EQ(labels_after("0 1:1\n1 1:1\n0 1:1\n"), (std::vector<float>{-1, 1, -1}));
  EXPECT_EQ(labels_after("4 1:1\n2 1:1\n"), (std::vector<float>{1, -1}));  // class ids
  EXPECT_EQ(labels_after("1 1:1\n1 1:1\n"), (std::vector<float>{1, 1}));   // one class of +-1

  // The test set takes the training set's map; a label outside it names the sample.
  const SparseDataset train = parse_libsvm("2 1:1\n4 1:1\n", "train.txt");
  SparseDataset test = parse_libsvm("4 1:1\n2 1:1\n", "test.txt");
  make_binary_labels(test, train);
  EXPECT_EQ(test.labels, (std::vector<float>{1, -1}));
  SparseDataset bad = parse_libsvm("4 1:1\n3 1:1\n", "test.txt");
  const std::string message = data_error_of([&] { make_binary_labels(bad, train); });
  EXPECT_THAT(message, AllOf(HasSubstr("test.txt"), HasSubstr("sample 2"), HasSubstr("label 3")));

  const std::string path = std::string(DTRAIN_TEST_DATA_DIR) + "/small.libsvm";
  SparseDataset three = read_libsvm(path);  // labels 1, -1, 0
  EXPECT_THAT(data_error_of([&] { make_binary_labels(three); }),
              AllOf(HasSubstr("small.libsvm"), HasSubstr("more than two label values")));
  SparseDataset single = parse_libsvm("7 1:1\n7 2:1\n", "one.txt");
  EXPECT_THAT(data_error_of([&] { make_binary_labels(single); }),
              AllOf(HasSubstr("one.txt"), HasSubstr("single label value 7")));
}

TEST(LibsvmReader, TakeFirstRowsKeepsAPrefix) {
  const SparseDataset data = parse_libsvm("1 1:1 3:2\n-1 2:5\n1 4:1\n", "t");
  const SparseDataset first = take_first_rows(data, 2);
  EXPECT_EQ(first.size(), 2);
  EXPECT_EQ(first.num_features, 4);
  EXPECT_EQ(first.columns, (std::vector<std::int32_t>{0, 2, 1}));
  EXPECT_EQ(first.labels, (std::vector<float>{1, -1}));
  check_sparse_dataset(first);
  EXPECT_EQ(take_first_rows(data, 0).size(), 3);
}

struct Malformed {
  const char* text;
  const char* line;  // "line N"
  const char* what;  // a piece of the message
};

class LibsvmMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(LibsvmMalformed, NamesFileLineAndFault) {
  const Malformed& c = GetParam();
  TempDir dir;
  const std::string path = dir.file("bad.libsvm");
  fixture::write_file(path, bytes_of(c.text));
  const std::string message = data_error_of([&] { read_libsvm(path); });
  EXPECT_THAT(message,
              AllOf(HasSubstr(path), HasSubstr(std::string(c.line) + ":"), HasSubstr(c.what)));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, LibsvmMalformed,
    ::testing::Values(Malformed{"1 1:1\n1 2:1\n1 3:1 9:1 5:1\n", "line 3",
                                "index 5 after 9: indices must increase"},
                      Malformed{"1 4:1 4:2\n", "line 1", "index 4 after 4"},
                      Malformed{"# header\n\n1 0:1\n", "line 3", "'0'"},
                      Malformed{"1 -3:1\n", "line 1", "not a positive integer"},
                      Malformed{"1 1.5:1\n", "line 1", "not a positive integer"},
                      Malformed{"1 x:1\n", "line 1", "not a positive integer"},
                      Malformed{"1 :1\n", "line 1", "not a positive integer"},
                      Malformed{"1 3000000000:1\n", "line 1", "larger than 2147483647"},
                      Malformed{"1 99999999999999999999999:1\n", "line 1", "larger than"},
                      Malformed{"1 1:1\n-1 2\n", "line 2", "'2' is not index:value"},
                      Malformed{"1 2:abc\n", "line 1",
                                "value 'abc' of index 2 is not a finite number"},
                      Malformed{"1 2:\n", "line 1", "value '' of index 2"},
                      Malformed{"1 2:nan\n", "line 1", "not a finite number"},
                      Malformed{"1 2:1e99\n", "line 1", "not a finite number"},
                      Malformed{"one 1:1\n", "line 1", "label 'one' is not a finite number"},
                      Malformed{"inf 1:1\n", "line 1", "label 'inf'"},
                      Malformed{"1:1 2:1\n", "line 1", "must start with a label"}));

TEST(LibsvmReader, BinaryFileIsAnError) {
  TempDir dir;
  const std::string path = dir.file("binary.libsvm");
  fixture::write_file(path, {'1', ' ', '1', ':', '1', '\n', '1', ' ', 0, '\n'});
  EXPECT_THAT(data_error_of([&] { read_libsvm(path); }),
              AllOf(HasSubstr(path), HasSubstr("line 2:"), HasSubstr("NUL byte")));
}

TEST(LibsvmReader, EmptyAndMissingFilesAreErrors) {
  TempDir dir;
  const std::string path = dir.file("empty.libsvm");
  fixture::write_file(path, bytes_of("# nothing but a comment\n\n"));
  EXPECT_THAT(data_error_of([&] { read_libsvm(path); }),
              AllOf(HasSubstr(path), HasSubstr("no sample")));
  EXPECT_THAT(data_error_of([&] { read_libsvm(dir.file("missing.libsvm")); }),
              AllOf(HasSubstr("missing.libsvm"), HasSubstr("does not exist")));
  EXPECT_THAT(data_error_of([&] { read_libsvm(dir.path().string()); }),
              HasSubstr("is a directory"));
}

}  // namespace
}  // namespace dtrain::data
