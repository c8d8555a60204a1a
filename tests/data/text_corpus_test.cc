// Byte-level text: which files a folder contributes, windows whose labels are the next bytes, the
// held-out split, seeded offsets, and one-line DataErrors for text that cannot make a window.
#include "dtrain/data/text_corpus.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "data_files.h"
#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

using fixture::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::uint8_t> bytes_of(const std::string& text) {
  return std::vector<std::uint8_t>(text.begin(), text.end());
}

std::string data_error(const std::function<void()>& run) {
  try {
    run();
  } catch (const DataError& e) {
    return e.what();
  }
  return "(no DataError)";
}

TEST(TextCorpus, AFolderGivesItsExtensionlessFilesInNameOrder) {
  TempDir dir;
  fixture::write_raw((dir.path() / "b").string(), bytes_of("second "));
  fixture::write_raw((dir.path() / "a").string(), bytes_of("first "));
  fixture::write_raw((dir.path() / "a.dat").string(), bytes_of("\x01\x02 binary index"));
  EXPECT_EQ(read_text_corpus(dir.path().string()), "first second ");
  // Without extensionless files, every regular file.
  TempDir notes;
  fixture::write_raw((notes.path() / "y.txt").string(), bytes_of("y"));
  fixture::write_raw((notes.path() / "x.txt").string(), bytes_of("x"));
  EXPECT_EQ(read_text_corpus(notes.path().string()), "xy");
  // A file is read as it is.
  EXPECT_EQ(read_text_corpus((notes.path() / "y.txt").string()), "y");
}

TEST(TextCorpus, WindowsHoldTheNextByteAsEachPositionsLabel) {
  // Bytes of a linear congruential sequence: every 9-byte run occurs once, so a window's offset is
  // found by searching for it.
  std::string text;
  std::uint32_t state = 12345;
  for (int i = 0; i < 1000; ++i) {
    state = state * 1664525u + 1013904223u;
    text += static_cast<char>(state >> 24);
  }
  TextSpec spec;
  spec.block = 8;
  spec.train_windows = 50;
  spec.test_windows = 20;
  spec.holdout = 0.2;
  const DenseSplits splits = make_text_windows(text, spec);
  ASSERT_EQ(splits.train.size(), 50);
  ASSERT_EQ(splits.test.size(), 20);
  EXPECT_EQ(splits.train.labels_per_sample, 8);
  EXPECT_EQ(splits.train.sample_shape(), (tensor::Shape{8}));
  EXPECT_EQ(splits.train.num_classes, 256);
  // Every window is a run of block + 1 bytes of its split: input byte t + 1 is label t.
  const auto check = [&](const Dataset& set, std::int64_t begin, std::int64_t end) {
    for (std::int64_t w = 0; w < set.size(); ++w) {
      std::string window;
      for (std::int64_t t = 0; t < 8; ++t) {
        window += static_cast<char>(static_cast<int>(set.images.data()[w * 8 + t]));
      }
      window += static_cast<char>(set.labels[static_cast<std::size_t>(w * 8 + 7)]);
      for (std::int64_t t = 0; t + 1 < 8; ++t) {
        EXPECT_EQ(set.labels[static_cast<std::size_t>(w * 8 + t)],
                  static_cast<std::int32_t>(set.images.data()[w * 8 + t + 1]));
      }
      const auto at = static_cast<std::int64_t>(text.find(window));
      ASSERT_GE(at, begin) << "window " << w;
      EXPECT_LE(at + 9, end) << "window " << w;
    }
  };
  check(splits.train, 0, 800);
  check(splits.test, 800, 1000);
  // Seeded: the same spec gives the same windows; another seed others.
  const DenseSplits again = make_text_windows(text, spec);
  EXPECT_EQ(again.train.labels, splits.train.labels);
  spec.seed = 2;
  EXPECT_NE(make_text_windows(text, spec).train.labels, splits.train.labels);
}

TEST(TextCorpus, DefaultWindowCountCoversTheTrainingSplitOnce) {
  const std::string text(10000, 'x');
  TextSpec spec;
  spec.block = 100;
  EXPECT_EQ(make_text_windows(text, spec).train.size(), 9000 / 100);
}

TEST(TextCorpus, BatchesCarryEveryPositionsLabel) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>(i % 200);
  TextSpec spec;
  spec.block = 4;
  spec.train_windows = 10;
  spec.test_windows = 3;
  const DenseSplits splits = make_text_windows(text, spec);
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  const std::vector<std::int64_t> indices{3, 0};
  gather_batch(splits.train, indices, x, y);
  EXPECT_EQ(x.shape(), (tensor::Shape{2, 4}));
  ASSERT_EQ(y.size(), 8u);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(y[static_cast<std::size_t>(t)],
              splits.train.labels[static_cast<std::size_t>(12 + t)]);
    EXPECT_EQ(y[static_cast<std::size_t>(4 + t)], splits.train.labels[static_cast<std::size_t>(t)]);
    EXPECT_EQ(x.data()[t], splits.train.images.data()[12 + t]);
  }
}

TEST(TextCorpus, TextThatCannotMakeAWindowIsNamed) {
  TempDir dir;
  EXPECT_THAT(data_error([&] { read_text_corpus((dir.path() / "missing").string()); }),
              HasSubstr("does not exist"));
  EXPECT_THAT(data_error([&] { read_text_corpus(dir.path().string()); }),
              AllOf(HasSubstr("is empty"), HasSubstr(dir.path().string())));
  TextSpec spec;
  spec.path = "short.txt";
  spec.block = 128;
  EXPECT_THAT(data_error([&] { make_text_windows(std::string(200, 'x'), spec); }),
              AllOf(HasSubstr("short.txt has 200 bytes"), HasSubstr("129 bytes")));
}

}  // namespace
}  // namespace dtrain::data
