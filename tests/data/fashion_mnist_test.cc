// The real Fashion-MNIST from Debian's dataset-fashion-mnist package (skipped when it is absent):
// sizes, first labels, pixel statistics before and after normalisation, and the decoded pixels of
// a few samples against a naive reader of the same files written here with zlib alone.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/data/idx_reader.h"
#include "dtrain/data/normalization.h"

namespace dtrain::data {
namespace {

constexpr const char* kDir = "/usr/share/datasets/fashion-mnist";

bool have_fashion_mnist() {
  return std::filesystem::exists(std::string(kDir) + "/train-images-idx3-ubyte.gz") &&
         std::filesystem::exists(std::string(kDir) + "/t10k-labels-idx1-ubyte.gz");
}

// The naive twin: the whole decompressed file through gzread, one byte at a time if need be.
std::vector<std::uint8_t> gunzip_naive(const std::string& path) {
  std::vector<std::uint8_t> bytes;
  gzFile file = gzopen(path.c_str(), "rb");
  EXPECT_NE(file, nullptr) << path;
  if (file == nullptr) return bytes;
  std::vector<std::uint8_t> chunk(1 << 16);
  int count = 0;
  while ((count = gzread(file, chunk.data(), static_cast<unsigned>(chunk.size()))) > 0) {
    bytes.insert(bytes.end(), chunk.begin(), chunk.begin() + count);
  }
  gzclose(file);
  return bytes;
}

struct Moments {
  double mean = 0, std = 0;
};

Moments moments(const tensor::Tensor& t) {
  double sum = 0, sum_sq = 0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data()[i];
    sum_sq += static_cast<double>(t.data()[i]) * t.data()[i];
  }
  const double n = static_cast<double>(t.numel());
  return {sum / n, std::sqrt(sum_sq / n - (sum / n) * (sum / n))};
}

TEST(FashionMnist, TrainingSet) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "apt-get install dataset-fashion-mnist to run this";
  const Dataset train = load_idx_dataset(kDir, Split::kTrain, "fashion-mnist");
  EXPECT_EQ(train.name, "fashion-mnist");
  EXPECT_EQ(train.images.shape(), (tensor::Shape{60000, 1, 28, 28}));
  ASSERT_EQ(train.size(), 60000);
  EXPECT_EQ(train.labels.front(), 9);  // an ankle boot
  EXPECT_EQ(train.labels[1], 0);       // a T-shirt
  EXPECT_EQ(train.labels.back(), 5);   // a sandal
  // 6000 images of each class.
  std::vector<int> per_class(10, 0);
  for (std::int32_t label : train.labels) ++per_class[static_cast<std::size_t>(label)];
  for (int count : per_class) EXPECT_EQ(count, 6000);
  // Normalised with the training set's own statistics: mean ~0, std ~1.
  const Moments m = moments(train.images);
  EXPECT_NEAR(m.mean, 0.0, 1e-3);
  EXPECT_NEAR(m.std, 1.0, 1e-3);

  // Against the naive reader: identical pixels for a few samples.
  const std::vector<std::uint8_t> raw =
      gunzip_naive(std::string(kDir) + "/train-images-idx3-ubyte.gz");
  ASSERT_EQ(raw.size(), 16u + 60000u * 784u);
  for (std::int64_t n : {0, 1, 12345, 59999}) {
    for (std::int64_t i = 0; i < 784; ++i) {
      const double expected =
          (raw[static_cast<std::size_t>(16 + n * 784 + i)] / 255.0 - 0.2860) / 0.3530;
      ASSERT_NEAR(train.images.data()[n * 784 + i], expected, 1e-5)
          << "sample " << n << " pixel " << i;
    }
  }
}

TEST(FashionMnist, PixelMeanBeforeNormalisation) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "apt-get install dataset-fashion-mnist to run this";
  // The identity normalisation leaves x / 255, whose mean over the training set is 0.2860.
  const Dataset train =
      load_idx_dataset(kDir, Split::kTrain, "fashion-mnist", Normalization{{0.0f}, {1.0f}});
  const Moments m = moments(train.images);
  EXPECT_NEAR(m.mean, 0.2860, 5e-4);
  EXPECT_NEAR(m.std, 0.3530, 5e-4);
}

TEST(FashionMnist, TestSet) {
  if (!have_fashion_mnist()) GTEST_SKIP() << "apt-get install dataset-fashion-mnist to run this";
  const Dataset test = load_idx_dataset(kDir, Split::kTest, "fashion-mnist");
  EXPECT_EQ(test.images.shape(), (tensor::Shape{10000, 1, 28, 28}));
  ASSERT_EQ(test.size(), 10000);
  EXPECT_EQ(test.labels.front(), 9);
  EXPECT_EQ(test.labels[1], 2);  // a pullover
  EXPECT_EQ(test.labels.back(), 5);
  // Normalised with the training statistics, the test set is close to but not exactly centred.
  const Moments m = moments(test.images);
  EXPECT_NEAR(m.mean, 0.0, 0.01);
  EXPECT_NEAR(m.std, 1.0, 0.01);
}

}  // namespace
}  // namespace dtrain::data
