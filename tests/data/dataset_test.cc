// Dataset accessors and gather_batch: the right samples land in the right batch rows.
#include "dtrain/data/dataset.h"

#include <gtest/gtest.h>

#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

// 6 samples of (2, 1, 3); element j of sample n holds 100 n + j, label (5 - n).
Dataset numbered() {
  Dataset data;
  data.name = "numbered";
  data.num_classes = 6;
  data.images = tensor::Tensor::empty({6, 2, 1, 3});
  for (std::int64_t n = 0; n < 6; ++n) {
    for (std::int64_t j = 0; j < 6; ++j)
      data.images.data()[n * 6 + j] = static_cast<float>(100 * n + j);
    data.labels.push_back(static_cast<std::int32_t>(5 - n));
  }
  return data;
}

TEST(Dataset, SizeAndSampleShape) {
  const Dataset data = numbered();
  EXPECT_EQ(data.size(), 6);
  EXPECT_EQ(data.sample_shape(), (tensor::Shape{2, 1, 3}));
  const Dataset empty;
  EXPECT_EQ(empty.size(), 0);
  EXPECT_TRUE(empty.sample_shape().empty());
  EXPECT_EQ(split_name(Split::kTrain), "train");
  EXPECT_EQ(split_name(Split::kTest), "test");
}

TEST(GatherBatch, CopiesTheIndexedSamplesInOrder) {
  const Dataset data = numbered();
  const std::vector<std::int64_t> indices = {3, 0, 3, 5};
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  gather_batch(data, indices, x, y);
  EXPECT_EQ(x.shape(), (tensor::Shape{4, 2, 1, 3}));
  EXPECT_EQ(y, (std::vector<std::int32_t>{2, 5, 2, 0}));
  for (std::int64_t b = 0; b < 4; ++b) {
    for (std::int64_t j = 0; j < 6; ++j) {
      EXPECT_EQ(x.data()[b * 6 + j],
                static_cast<float>(100 * indices[static_cast<std::size_t>(b)] + j));
    }
  }
}

TEST(GatherBatch, ReusesTheBufferWhileTheBatchSizeHolds) {
  const Dataset data = numbered();
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  const std::vector<std::int64_t> first = {0, 1};
  const std::vector<std::int64_t> second = {4, 2};
  gather_batch(data, first, x, y);
  const float* buffer = x.data();
  gather_batch(data, second, x, y);
  EXPECT_EQ(x.data(), buffer);
  EXPECT_EQ(x.at({0, 1, 0, 2}), 405.0f);
  EXPECT_EQ(x.at({1, 0, 0, 0}), 200.0f);
  EXPECT_EQ(y, (std::vector<std::int32_t>{1, 3}));
  // A short last batch reshapes.
  const std::vector<std::int64_t> last = {5};
  gather_batch(data, last, x, y);
  EXPECT_EQ(x.shape(), (tensor::Shape{1, 2, 1, 3}));
  EXPECT_EQ(x.at({0, 0, 0, 0}), 500.0f);
  EXPECT_EQ(y, std::vector<std::int32_t>{0});
}

TEST(GatherBatch, EmptyBatchAndBadIndices) {
  const Dataset data = numbered();
  tensor::Tensor x;
  std::vector<std::int32_t> y = {7};
  gather_batch(data, std::vector<std::int64_t>{}, x, y);
  EXPECT_EQ(x.shape(), (tensor::Shape{0, 2, 1, 3}));
  EXPECT_TRUE(y.empty());
  EXPECT_THROW(gather_batch(data, std::vector<std::int64_t>{0, 6}, x, y), InternalError);
  EXPECT_THROW(gather_batch(data, std::vector<std::int64_t>{-1}, x, y), InternalError);
}

}  // namespace
}  // namespace dtrain::data
