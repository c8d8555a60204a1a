// IDX reading: exact round trips of small raw and gzip files, the data set loader, and every kind
// of malformed file producing a one-line DataError that names the file and the fault.
#include "dtrain/data/idx_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "data_files.h"
#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"

namespace dtrain::data {
namespace {

using fixture::data_error_of;
using fixture::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

// Writes a small IDX data set of `count` h x w images per split into dir, raw or gzip.
void write_idx_set(const TempDir& dir, std::int64_t train_count, std::int64_t test_count,
                   std::uint32_t h, std::uint32_t w, bool gzip) {
  const std::string gz = gzip ? ".gz" : "";
  const std::int64_t pixels = h * w;
  std::vector<std::uint8_t> train_labels, test_labels;
  for (std::int64_t n = 0; n < train_count; ++n)
    train_labels.push_back(static_cast<std::uint8_t>(n % 10));
  for (std::int64_t n = 0; n < test_count; ++n)
    test_labels.push_back(static_cast<std::uint8_t>((n * 3) % 10));
  fixture::write_file(dir.file("train-images-idx3-ubyte" + gz),
                      fixture::idx_u8({static_cast<std::uint32_t>(train_count), h, w},
                                      fixture::image_values(0, train_count, pixels)));
  fixture::write_file(dir.file("train-labels-idx1-ubyte" + gz),
                      fixture::idx_u8({static_cast<std::uint32_t>(train_count)}, train_labels));
  fixture::write_file(dir.file("t10k-images-idx3-ubyte" + gz),
                      fixture::idx_u8({static_cast<std::uint32_t>(test_count), h, w},
                                      fixture::image_values(1000, test_count, pixels)));
  fixture::write_file(dir.file("t10k-labels-idx1-ubyte" + gz),
                      fixture::idx_u8({static_cast<std::uint32_t>(test_count)}, test_labels));
}

class IdxRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTrip, ReadsBackExactlyWhatWasWritten) {
  const bool gzip = GetParam();
  TempDir dir;
  const std::string path = dir.file(gzip ? "a.idx.gz" : "a.idx");
  const std::vector<std::uint8_t> values = fixture::image_values(0, 3, 20);  // 3 x 4 x 5
  fixture::write_file(path, fixture::idx_u8({3, 4, 5}, values));
  const IdxArray array = read_idx(path);
  EXPECT_EQ(array.dims, (std::vector<std::int64_t>{3, 4, 5}));
  EXPECT_EQ(array.values, values);
  EXPECT_EQ(read_idx(path, 3).values, values);

  const std::vector<std::uint8_t> labels = {0, 9, 255, 7};
  fixture::write_file(path, fixture::idx_u8({4}, labels));
  const IdxArray label_array = read_idx(path, 1);
  EXPECT_EQ(label_array.dims, (std::vector<std::int64_t>{4}));
  EXPECT_EQ(label_array.values, labels);
}

TEST_P(IdxRoundTrip, ReadsAnEmptyArray) {
  TempDir dir;
  const std::string path = dir.file(GetParam() ? "e.gz" : "e");
  fixture::write_file(path, fixture::idx_u8({0, 28, 28}, {}));
  const IdxArray array = read_idx(path, 3);
  EXPECT_EQ(array.dims, (std::vector<std::int64_t>{0, 28, 28}));
  EXPECT_TRUE(array.values.empty());
}

TEST_P(IdxRoundTrip, LoadsBothSplitsNormalised) {
  const bool gzip = GetParam();
  TempDir dir;
  write_idx_set(dir, 12, 5, 3, 4, gzip);
  for (Split split : {Split::kTrain, Split::kTest}) {
    const Dataset data = load_idx_dataset(dir.path().string(), split, "fashion-mnist");
    const std::int64_t count = split == Split::kTrain ? 12 : 5;
    const std::int64_t first = split == Split::kTrain ? 0 : 1000;
    EXPECT_EQ(data.name, "fashion-mnist");
    EXPECT_EQ(data.num_classes, 10);
    ASSERT_EQ(data.size(), count);
    EXPECT_EQ(data.images.shape(), (tensor::Shape{count, 1, 3, 4}));
    EXPECT_EQ(data.sample_shape(), (tensor::Shape{1, 3, 4}));
    for (std::int64_t n = 0; n < count; ++n) {
      const std::int32_t label = split == Split::kTrain ? n % 10 : (n * 3) % 10;
      EXPECT_EQ(data.labels[static_cast<std::size_t>(n)], label) << "sample " << n;
      for (std::int64_t i = 0; i < 12; ++i) {
        const double expected = (fixture::pattern(first + n, i) / 255.0 - 0.2860) / 0.3530;
        EXPECT_NEAR(data.images.data()[n * 12 + i], expected, 1e-5)
            << "sample " << n << " pixel " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxRoundTrip, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "gzip" : "raw"; });

TEST(IdxDataset, TakesAnExplicitNormalisationAndAnyName) {
  TempDir dir;
  write_idx_set(dir, 4, 2, 2, 2, false);
  const Dataset data = load_idx_dataset(dir.path().string(), Split::kTrain, "my-digits",
                                        Normalization{{0.5f}, {0.25f}});
  EXPECT_EQ(data.name, "my-digits");
  for (std::int64_t i = 0; i < data.images.numel(); ++i) {
    const double expected = (fixture::pattern(i / 4, i % 4) / 255.0 - 0.5) / 0.25;
    EXPECT_NEAR(data.images.data()[i], expected, 1e-5);
  }
  EXPECT_THROW(load_idx_dataset(dir.path().string(), Split::kTrain, "my-digits"), ConfigError);
  EXPECT_THROW(
      load_idx_dataset(dir.path().string(), Split::kTrain, "x", Normalization{{0.5f}, {0.0f}}),
      ConfigError);
}

TEST(IdxDataset, AcceptsTheDottedMnistSpelling) {
  TempDir dir;
  fixture::write_file(dir.file("t10k-images.idx3-ubyte"),
                      fixture::idx_u8({2, 2, 2}, fixture::image_values(0, 2, 4)));
  fixture::write_file(dir.file("t10k-labels.idx1-ubyte.gz"), fixture::idx_u8({2}, {4, 1}));
  const Dataset data = load_idx_dataset(dir.path().string(), Split::kTest, "mnist");
  EXPECT_EQ(data.labels, (std::vector<std::int32_t>{4, 1}));
  EXPECT_NEAR(data.images.data()[0], (fixture::pattern(0, 0) / 255.0 - 0.1307) / 0.3081, 1e-5);
}

// ---- malformed input ------------------------------------------------------------------------

TEST(IdxErrors, MissingDirectoryNamesItAndTheDebianPackage) {
  const std::string message = data_error_of(
      [] { load_idx_dataset("/nonexistent/dtrain/fmnist", Split::kTrain, "fashion-mnist"); });
  EXPECT_THAT(message, AllOf(HasSubstr("/nonexistent/dtrain/fmnist"), HasSubstr("does not exist"),
                             HasSubstr("apt-get install dataset-fashion-mnist"),
                             HasSubstr("/usr/share/datasets/fashion-mnist/")));
}

TEST(IdxErrors, MissingFileNamesWhatWasLookedFor) {
  TempDir dir;
  fixture::write_file(dir.file("train-images-idx3-ubyte"), fixture::idx_u8({1, 1, 1}, {0}));
  const std::string message =
      data_error_of([&] { load_idx_dataset(dir.path().string(), Split::kTrain, "fashion-mnist"); });
  EXPECT_THAT(message, AllOf(HasSubstr(dir.path().string()), HasSubstr("train-labels-idx1-ubyte"),
                             HasSubstr("dataset-fashion-mnist")));
  const std::string direct = data_error_of([&] { read_idx(dir.file("nothing.gz")); });
  EXPECT_THAT(direct, AllOf(HasSubstr(dir.file("nothing.gz")), HasSubstr("does not exist")));
}

TEST(IdxErrors, PathThatIsAFileOrADirectory) {
  TempDir dir;
  fixture::write_file(dir.file("plain"), {1, 2, 3});
  EXPECT_THAT(data_error_of([&] { load_idx_dataset(dir.file("plain"), Split::kTrain, "mnist"); }),
              HasSubstr("not a directory"));
  EXPECT_THAT(data_error_of([&] { read_idx(dir.path().string()); }), HasSubstr("is a directory"));
}

class IdxTruncated : public ::testing::TestWithParam<bool> {};

TEST_P(IdxTruncated, SaysHowManyBytesWereExpectedAndGot) {
  TempDir dir;
  const std::string path = dir.file(GetParam() ? "t.gz" : "t");
  // Header: 5 x 4 x 4 = 80 bytes of data; the file has 70.
  fixture::write_file(path, fixture::idx_bytes(0x803, {5, 4, 4}, fixture::image_values(0, 1, 70)));
  EXPECT_THAT(
      data_error_of([&] { read_idx(path); }),
      AllOf(HasSubstr(path), HasSubstr("truncated"),
            HasSubstr("expected 80 bytes of data after the 16-byte header"), HasSubstr("got 70")));
}

TEST_P(IdxTruncated, InTheHeader) {
  TempDir dir;
  const std::string path = dir.file(GetParam() ? "h.gz" : "h");
  fixture::write_file(path, {0, 0, 8, 3, 0, 0, 0, 5, 0, 0});
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("16-byte header")));
  fixture::write_file(path, {0, 0});
  EXPECT_THAT(data_error_of([&] { read_idx(path); }), HasSubstr("4-byte magic number"));
}

TEST_P(IdxTruncated, AbsurdHeaderIsRejectedBeforeAllocating) {
  TempDir dir;
  const std::string path = dir.file(GetParam() ? "big.gz" : "big");
  // Claims 4294967295^3 bytes (saturated) and 4 GiB x 60000 in a file of a few bytes.
  fixture::write_file(path,
                      fixture::idx_bytes(0x803, {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}, {1, 2}));
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("truncated")));
  fixture::write_file(path, fixture::idx_bytes(0x803, {60000, 65536, 65536}, {1, 2, 3}));
  const Stopwatch watch;
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr("expected 257698037760000 bytes"), HasSubstr("got")));
  EXPECT_LT(watch.seconds(), 1.0) << "the reader must not try to fill a 257 TB buffer";
}

TEST_P(IdxTruncated, TrailingBytesAreAnError) {
  TempDir dir;
  const std::string path = dir.file(GetParam() ? "long.gz" : "long");
  fixture::write_file(path, fixture::idx_bytes(0x801, {3}, {1, 2, 3, 4}));
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("longer than its header says")));
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxTruncated, ::testing::Values(false, true),
                         [](const auto& param_info) { return param_info.param ? "gzip" : "raw"; });

TEST(IdxErrors, WrongMagicGivesTheValueReadAndTheOneExpected) {
  TempDir dir;
  const std::string path = dir.file("m");
  fixture::write_file(path, fixture::idx_u8({3}, {1, 2, 3}));  // a labels file
  EXPECT_THAT(data_error_of([&] { read_idx(path, 3); }),
              AllOf(HasSubstr(path), HasSubstr("wrong magic number 0x00000801"),
                    HasSubstr("expected 0x00000803")));
  fixture::write_file(path, fixture::idx_bytes(0x12345678u, {}, {1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_THAT(data_error_of([&] { read_idx(path, 1); }),
              AllOf(HasSubstr("wrong magic number 0x12345678"), HasSubstr("expected 0x00000801")));
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr("0x12345678"), HasSubstr("expected 0x000008nn")));
  fixture::write_file(path, fixture::idx_bytes(0x800u, {}, {}));  // zero dimensions
  EXPECT_THAT(data_error_of([&] { read_idx(path); }), HasSubstr("wrong magic number 0x00000800"));
}

TEST(IdxErrors, WrongMagicInTheDataSetNamesTheFile) {
  TempDir dir;
  write_idx_set(dir, 3, 3, 2, 2, false);
  // Swap in a labels file where the images belong.
  fixture::write_file(dir.file("train-images-idx3-ubyte"), fixture::idx_u8({3}, {1, 2, 3}));
  EXPECT_THAT(data_error_of([&] { load_idx_dataset(dir.path().string(), Split::kTrain, "mnist"); }),
              AllOf(HasSubstr(dir.file("train-images-idx3-ubyte")),
                    HasSubstr("wrong magic number 0x00000801, expected 0x00000803")));
}

TEST(IdxErrors, NonUint8TypeByteIsNamed) {
  TempDir dir;
  const std::string path = dir.file("f.gz");
  fixture::write_file(path, fixture::idx_bytes(0x00000D01u, {1}, {0, 0, 0x80, 0x3F}));
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("type byte 0x0D (float32)"), HasSubstr("uint8")));
}

TEST(IdxErrors, ImageAndLabelCountsMustMatch) {
  TempDir dir;
  write_idx_set(dir, 5, 2, 2, 2, true);
  fixture::write_file(dir.file("train-labels-idx1-ubyte.gz"), fixture::idx_u8({4}, {1, 2, 3, 4}));
  EXPECT_THAT(
      data_error_of([&] { load_idx_dataset(dir.path().string(), Split::kTrain, "mnist"); }),
      AllOf(HasSubstr("5 images"), HasSubstr("4 labels"), HasSubstr("train-labels-idx1-ubyte.gz")));
}

TEST(IdxErrors, LabelOutOfRangeGivesIndexAndValue) {
  TempDir dir;
  write_idx_set(dir, 5, 2, 2, 2, false);
  fixture::write_file(dir.file("train-labels-idx1-ubyte"), fixture::idx_u8({5}, {1, 2, 3, 12, 4}));
  EXPECT_THAT(data_error_of([&] { load_idx_dataset(dir.path().string(), Split::kTrain, "mnist"); }),
              AllOf(HasSubstr(dir.file("train-labels-idx1-ubyte")),
                    HasSubstr("label 12 at index 3"), HasSubstr("[0, 10)")));
}

TEST(IdxErrors, EmptyDataSet) {
  TempDir dir;
  write_idx_set(dir, 0, 1, 2, 2, false);
  EXPECT_THAT(data_error_of([&] { load_idx_dataset(dir.path().string(), Split::kTrain, "mnist"); }),
              HasSubstr("holds no images"));
}

TEST(IdxErrors, CorruptGzipStream) {
  TempDir dir;
  const std::string path = dir.file("c.gz");
  fixture::write_file(path, fixture::idx_u8({4, 16, 16}, fixture::image_values(0, 4, 256)));
  std::vector<std::uint8_t> bytes = fixture::read_raw(path);
  ASSERT_GT(bytes.size(), 40u);
  // Damage the deflate data in the middle of the stream.
  for (std::size_t i = 12; i < bytes.size() - 10; i += 3) bytes[i] ^= 0x5A;
  fixture::write_raw(path, bytes);
  EXPECT_THAT(data_error_of([&] { read_idx(path); }), AllOf(HasSubstr(path), HasSubstr("gzip")));
}

TEST(IdxErrors, CrcMismatchInGzipTrailer) {
  TempDir dir;
  const std::string path = dir.file("crc.gz");
  fixture::write_file(path, fixture::idx_u8({2, 2, 2}, fixture::image_values(0, 2, 4)));
  std::vector<std::uint8_t> bytes = fixture::read_raw(path);
  bytes[bytes.size() - 8] ^= 0xFF;  // first byte of the CRC-32
  fixture::write_raw(path, bytes);
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("corrupt gzip stream")));
}

TEST(IdxErrors, TruncatedGzipStream) {
  TempDir dir;
  const std::string path = dir.file("cut.gz");
  fixture::write_file(path, fixture::idx_u8({8, 16, 16}, fixture::image_values(0, 8, 256)));
  std::vector<std::uint8_t> bytes = fixture::read_raw(path);
  bytes.resize(bytes.size() / 2);
  fixture::write_raw(path, bytes);
  EXPECT_THAT(data_error_of([&] { read_idx(path); }),
              AllOf(HasSubstr(path), HasSubstr("truncated"), HasSubstr("gzip")));
}

}  // namespace
}  // namespace dtrain::data
