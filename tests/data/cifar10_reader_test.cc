// CIFAR-10 binary reading: exact round trips of small batch files (raw and gzip, flat or in
// cifar-10-batches-bin/), and malformed files producing one-line DataErrors.
#include "dtrain/data/cifar10_reader.h"

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

// Records per training batch file, and their labels (record r of batch b: label (b + 3r) % 10).
constexpr std::int64_t kBatchRecords[5] = {2, 3, 1, 2, 2};

std::vector<std::uint8_t> batch_labels(int batch, std::int64_t records) {
  std::vector<std::uint8_t> labels;
  for (std::int64_t r = 0; r < records; ++r)
    labels.push_back(static_cast<std::uint8_t>((batch + 3 * r) % 10));
  return labels;
}

// Writes data_batch_1..5 (sample n of the training set has pixels pattern(n, i)) and test_batch
// (pattern(500 + n, i), labels 7, 0, 9) into folder; even batches gzip-compressed when mixed.
void write_cifar(const std::filesystem::path& folder, bool mixed_gzip) {
  std::filesystem::create_directories(folder);
  std::int64_t first = 0;
  for (int b = 1; b <= 5; ++b) {
    const std::string name =
        "data_batch_" + std::to_string(b) + ".bin" + (mixed_gzip && b % 2 == 0 ? ".gz" : "");
    fixture::write_file((folder / name).string(),
                        fixture::cifar_bytes(first, batch_labels(b, kBatchRecords[b - 1])));
    first += kBatchRecords[b - 1];
  }
  fixture::write_file((folder / (mixed_gzip ? "test_batch.bin.gz" : "test_batch.bin")).string(),
                      fixture::cifar_bytes(500, {7, 0, 9}));
}

const Normalization kIdentity{{0.0f, 0.0f, 0.0f}, {1.0f, 1.0f, 1.0f}};

class CifarRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(CifarRoundTrip, TrainingBatchesInOrderWithChannelsFirst) {
  TempDir dir;
  write_cifar(dir.path(), GetParam());
  const Dataset data = load_cifar10(dir.path().string(), Split::kTrain, kIdentity);
  EXPECT_EQ(data.name, "cifar10");
  EXPECT_EQ(data.num_classes, 10);
  ASSERT_EQ(data.size(), 10);
  EXPECT_EQ(data.images.shape(), (tensor::Shape{10, 3, 32, 32}));
  std::vector<std::int32_t> expected_labels;
  for (int b = 1; b <= 5; ++b) {
    for (std::uint8_t label : batch_labels(b, kBatchRecords[b - 1]))
      expected_labels.push_back(label);
  }
  EXPECT_EQ(data.labels, expected_labels);
  // Pixel byte i of a record is channel i / 1024, row (i % 1024) / 32, column i % 32.
  for (std::int64_t n = 0; n < 10; ++n) {
    for (std::int64_t i : {0, 1, 31, 32, 1023, 1024, 2047, 2048, 3071}) {
      const float expected = static_cast<float>(fixture::pattern(n, i) / 255.0);
      EXPECT_NEAR(data.images.at({n, i / 1024, (i % 1024) / 32, i % 32}), expected, 1e-6)
          << "sample " << n << " byte " << i;
    }
  }
}

TEST_P(CifarRoundTrip, TestBatchWithStandardNormalisation) {
  TempDir dir;
  write_cifar(dir.path(), GetParam());
  const Dataset data = load_cifar10(dir.path().string(), Split::kTest);
  EXPECT_EQ(data.labels, (std::vector<std::int32_t>{7, 0, 9}));
  const Normalization norm = standard_normalization("cifar10");
  for (std::int64_t n = 0; n < 3; ++n) {
    for (std::int64_t i = 0; i < 3072; i += 97) {
      const std::size_t c = static_cast<std::size_t>(i / 1024);
      const double expected = (fixture::pattern(500 + n, i) / 255.0 - norm.mean[c]) / norm.std[c];
      EXPECT_NEAR(data.images.data()[n * 3072 + i], expected, 1e-5);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, CifarRoundTrip, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "gzip" : "raw"; });

TEST(Cifar, FindsTheUnpackedSubfolder) {
  TempDir dir;
  write_cifar(dir.path() / "cifar-10-batches-bin", false);
  const Dataset data = load_cifar10(dir.path().string(), Split::kTest);
  EXPECT_EQ(data.size(), 3);
}

TEST(CifarErrors, MissingDirectoryAndFile) {
  EXPECT_THAT(data_error_of([] { load_cifar10("/nonexistent/cifar", Split::kTrain); }),
              AllOf(HasSubstr("/nonexistent/cifar"), HasSubstr("does not exist"),
                    HasSubstr("binary version")));
  TempDir dir;
  write_cifar(dir.path(), false);
  std::filesystem::remove(dir.path() / "data_batch_4.bin");
  EXPECT_THAT(data_error_of([&] { load_cifar10(dir.path().string(), Split::kTrain); }),
              AllOf(HasSubstr(dir.file("data_batch_4.bin")), HasSubstr("does not exist")));
}

TEST(CifarErrors, SizeNotAMultipleOfTheRecord) {
  for (const char* name : {"test_batch.bin", "test_batch.bin.gz"}) {
    TempDir dir;
    std::vector<std::uint8_t> bytes = fixture::cifar_bytes(0, {1, 2});
    bytes.resize(bytes.size() - 100);  // 6146 - 100 = 6046 = 1 record + 2973 bytes
    fixture::write_file(dir.file(name), bytes);
    EXPECT_THAT(data_error_of([&] { load_cifar10(dir.path().string(), Split::kTest); }),
                AllOf(HasSubstr(dir.file(name)), HasSubstr("6046 bytes"),
                      HasSubstr("not a multiple of the 3073-byte record"),
                      HasSubstr("1 whole records"), HasSubstr("2973 bytes over")))
        << name;
  }
}

TEST(CifarErrors, EmptyFile) {
  TempDir dir;
  fixture::write_file(dir.file("test_batch.bin"), {});
  EXPECT_THAT(data_error_of([&] { load_cifar10(dir.path().string(), Split::kTest); }),
              AllOf(HasSubstr(dir.file("test_batch.bin")), HasSubstr("empty")));
}

TEST(CifarErrors, LabelOutOfRangeGivesRecordAndValue) {
  TempDir dir;
  fixture::write_file(dir.file("test_batch.bin"), fixture::cifar_bytes(0, {1, 2, 10, 3}));
  EXPECT_THAT(data_error_of([&] { load_cifar10(dir.path().string(), Split::kTest); }),
              AllOf(HasSubstr(dir.file("test_batch.bin")), HasSubstr("label 10 of record 2"),
                    HasSubstr("[0, 10)")));
}

TEST(CifarErrors, CorruptGzip) {
  TempDir dir;
  const std::string path = dir.file("test_batch.bin.gz");
  fixture::write_file(path, fixture::cifar_bytes(0, {1, 2}));
  std::vector<std::uint8_t> bytes = fixture::read_raw(path);
  bytes.resize(bytes.size() - 20);
  fixture::write_raw(path, bytes);
  EXPECT_THAT(data_error_of([&] { load_cifar10(dir.path().string(), Split::kTest); }),
              AllOf(HasSubstr(path), HasSubstr("gzip")));
}

TEST(CifarErrors, WrongNormalisationIsAConfigError) {
  TempDir dir;
  write_cifar(dir.path(), false);
  EXPECT_THROW(load_cifar10(dir.path().string(), Split::kTest, Normalization{{0.5f}, {0.25f}}),
               ConfigError);
}

}  // namespace
}  // namespace dtrain::data
