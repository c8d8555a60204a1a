#include "dtrain/nn/loss.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;
using testing::random_tensor;

// Central differences of a scalar loss of `v` (perturbed in place), against `analytic`.
template <typename Loss>
void expect_matches_finite_differences(tensor::Tensor& v, const tensor::Tensor& analytic,
                                       Loss loss) {
  const double h = 1e-2;
  for (std::int64_t i = 0; i < v.numel(); ++i) {
    const float saved = v.data()[i];
    v.data()[i] = static_cast<float>(saved + h);
    const double plus = loss();
    v.data()[i] = static_cast<float>(saved - h);
    const double minus = loss();
    v.data()[i] = saved;
    const double numeric = (plus - minus) / (2.0 * h);
    const double a = analytic.data()[i];
    EXPECT_NEAR(a, numeric, 1e-4 + 1e-2 * std::fabs(numeric)) << "element " << i;
  }
}

// logits [1, 2, 3], label 2: softmax = [0.0900306, 0.2447285, 0.6652410],
// loss = -log 0.6652410 = 0.4076060; the gradient is softmax - onehot.
// logits [0, 0, 0], label 0: loss = log 3 = 1.0986123, gradient [1/3 - 1, 1/3, 1/3].
// Batch mean: loss (0.4076060 + 1.0986123) / 2, gradient rows halved.
TEST(SoftmaxCrossEntropyTest, ValuesByHand) {
  const tensor::Tensor logits = tensor::Tensor::from({2, 3}, {1, 2, 3, 0, 0, 0});
  const std::vector<std::int32_t> labels{2, 0};
  tensor::Tensor dlogits;
  const float loss = softmax_cross_entropy(logits, labels, &dlogits);
  EXPECT_NEAR(loss, (0.4076060 + 1.0986123) / 2.0, 1e-6);
  ASSERT_EQ(dlogits.shape(), logits.shape());
  const std::vector<double> expected{0.0900306 / 2,     0.2447285 / 2, (0.6652410 - 1) / 2,
                                     (1.0 / 3 - 1) / 2, 1.0 / 6,       1.0 / 6};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(dlogits.data()[i], expected[i], 1e-6) << i;
  }
  // Without a gradient tensor the loss is the same.
  EXPECT_EQ(softmax_cross_entropy(logits, labels, nullptr), loss);
}

TEST(SoftmaxCrossEntropyTest, StableForHugeLogits) {
  // Row 0: label holds the max by 1000, loss ~0. Row 1: the label is 1000 below, loss ~1000.
  const tensor::Tensor logits = tensor::Tensor::from({2, 2}, {1000, 0, -1000, 0});
  tensor::Tensor dlogits;
  const float loss = softmax_cross_entropy(logits, std::vector<std::int32_t>{0, 0}, &dlogits);
  EXPECT_FLOAT_EQ(loss, 500.0f);
  const std::vector<float> expected{0, 0, -0.5f, 0.5f};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_TRUE(std::isfinite(dlogits.data()[i]));
    EXPECT_NEAR(dlogits.data()[i], expected[i], 1e-6) << i;
  }
}

TEST(SoftmaxCrossEntropyTest, GradientMatchesFiniteDifferences) {
  tensor::Tensor logits = random_tensor({4, 5}, 3, 3.0f);
  const std::vector<std::int32_t> labels{4, 0, 2, 2};
  tensor::Tensor dlogits;
  softmax_cross_entropy(logits, labels, &dlogits);
  expect_matches_finite_differences(logits, dlogits,
                                    [&] { return softmax_cross_entropy(logits, labels, nullptr); });
}

TEST(SoftmaxCrossEntropyTest, LabelOutOfRangeIsADataErrorAndWritesNothing) {
  const tensor::Tensor logits = random_tensor({3, 3}, 1);
  tensor::Tensor dlogits = tensor::Tensor::zeros({3, 3});
  dlogits.fill(42.0f);
  for (std::int32_t bad : {7, 3, -1}) {
    try {
      softmax_cross_entropy(logits, std::vector<std::int32_t>{0, bad, 1}, &dlogits);
      FAIL() << "expected DataError for label " << bad;
    } catch (const DataError& e) {
      EXPECT_THAT(e.what(), HasSubstr(fmt::format("label[1] = {} out of range [0, 3)", bad)));
    }
  }
  for (float v : dlogits.to_vector()) EXPECT_EQ(v, 42.0f);
}

TEST(SoftmaxCrossEntropyTest, MismatchedShapesAreShapeErrors) {
  const tensor::Tensor logits = random_tensor({3, 4}, 1);
  EXPECT_THROW(softmax_cross_entropy(logits, std::vector<std::int32_t>{0, 1}, nullptr), ShapeError);
  EXPECT_THROW(
      softmax_cross_entropy(random_tensor({12}, 1), std::vector<std::int32_t>(12, 0), nullptr),
      ShapeError);
  EXPECT_THROW(count_correct(logits, std::vector<std::int32_t>{0}), ShapeError);
}

// pred [1, 2, 3, 4], target [0, 2, 5, 4]: loss (1 + 0 + 4 + 0) / 4 = 1.25,
// gradient 2 (pred - target) / 4 = [0.5, 0, -1, 0].
TEST(MseLossTest, ValuesByHand) {
  const tensor::Tensor pred = tensor::Tensor::from({2, 2}, {1, 2, 3, 4});
  const tensor::Tensor target = tensor::Tensor::from({2, 2}, {0, 2, 5, 4});
  tensor::Tensor dpred;
  EXPECT_FLOAT_EQ(mse_loss(pred, target, &dpred), 1.25f);
  EXPECT_EQ(dpred.to_vector(), (std::vector<float>{0.5f, 0, -1, 0}));
  EXPECT_FLOAT_EQ(mse_loss(pred, target, nullptr), 1.25f);
}

TEST(MseLossTest, GradientMatchesFiniteDifferences) {
  tensor::Tensor pred = random_tensor({3, 5}, 1);
  const tensor::Tensor target = random_tensor({3, 5}, 2);
  tensor::Tensor dpred;
  mse_loss(pred, target, &dpred);
  expect_matches_finite_differences(pred, dpred, [&] { return mse_loss(pred, target, nullptr); });
}

TEST(MseLossTest, DifferentShapesNameBoth) {
  try {
    mse_loss(random_tensor({2, 3}, 1), random_tensor({3, 2}, 1), nullptr);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("[2, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("[3, 2]"));
  }
}

TEST(CountCorrectTest, ArgmaxWithTheFirstMaximumWinningTies) {
  // Row 0: argmax 1 (tie of 1 and 2 goes to 1). Row 1: argmax 0. Row 2: all equal, argmax 0.
  const tensor::Tensor logits = tensor::Tensor::from({3, 3}, {1, 3, 3, 5, -1, 2, 0, 0, 0});
  EXPECT_EQ(count_correct(logits, std::vector<std::int32_t>{1, 0, 0}), 3);
  EXPECT_EQ(count_correct(logits, std::vector<std::int32_t>{2, 0, 0}), 2);
  EXPECT_EQ(count_correct(logits, std::vector<std::int32_t>{2, 1, 2}), 0);
}

// Logits (B, T, V) are B*T rows: the loss, its gradient and the count equal those of the same
// logits viewed as (B*T, V), bit for bit; the labels must number B*T.
TEST(SoftmaxCrossEntropyTest, SequenceLogitsAreRowsOfTheirLastDimension) {
  const tensor::Tensor logits = random_tensor({2, 3, 5}, 11, 3.0f);
  const std::vector<std::int32_t> labels{4, 0, 2, 2, 1, 3};
  tensor::Tensor d3, d2;
  const float loss3 = softmax_cross_entropy(logits, labels, &d3);
  const float loss2 = softmax_cross_entropy(logits.reshape({6, 5}), labels, &d2);
  EXPECT_EQ(loss3, loss2);
  EXPECT_EQ(d3.shape(), (tensor::Shape{2, 3, 5}));
  EXPECT_EQ(d3.to_vector(), d2.to_vector());
  EXPECT_EQ(count_correct(logits, labels), count_correct(logits.reshape({6, 5}), labels));
  try {
    softmax_cross_entropy(logits, std::vector<std::int32_t>{0, 1}, nullptr);
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_THAT(e.what(), HasSubstr("logits [2, 3, 5] need 6 labels, got 2"));
  }
  EXPECT_THROW(count_correct(logits, std::vector<std::int32_t>(2, 0)), ShapeError);
  try {
    softmax_cross_entropy(logits, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5}, nullptr);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_THAT(e.what(), HasSubstr("label[5] = 5 out of range [0, 5)"));
  }
}

// The loss is the mean over all rows, the same with 1 and 2 threads (rows are summed in order).
TEST(SoftmaxCrossEntropyTest, LargeBatchesDoNotDependOnTheThreadCount) {
  const tensor::Tensor logits = random_tensor({4, 128, 256}, 12, 4.0f);
  std::vector<std::int32_t> labels(512);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<std::int32_t>(i * 7 % 256);
  tensor::Tensor d1, d2;
  const float one = softmax_cross_entropy(logits, labels, &d1);
  double reference = 0.0;
  for (std::int64_t r = 0; r < 512; ++r) {
    const float* row = logits.data() + r * 256;
    double sum = 0.0;
    for (std::int64_t c = 0; c < 256; ++c) sum += std::exp(static_cast<double>(row[c]));
    reference += std::log(sum) - row[labels[static_cast<std::size_t>(r)]];
  }
  EXPECT_NEAR(one, reference / 512, 1e-5);
  ScopedComputePool pool(2);
  EXPECT_EQ(softmax_cross_entropy(logits, labels, &d2), one);
  EXPECT_EQ(d2.to_vector(), d1.to_vector());
}

}  // namespace
}  // namespace dtrain::nn
