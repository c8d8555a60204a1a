// Hogwild!: one thread is plain sequential SGD bit for bit; two (and four) threads racing on one
// weight vector reach the one-thread loss on the sparse synthetic problem; a dense problem with
// constant collisions still converges (and runs clean under ThreadSanitizer: every shared access
// is an atomic); the losses' derivatives match finite differences.
#include "dtrain/parallel/hogwild.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/data/sparse_synthetic.h"

namespace dtrain::parallel {
namespace {

data::SparseSyntheticConfig problem(std::int64_t samples, std::int64_t features,
                                    std::int64_t nonzeros, double noise = 0.0) {
  data::SparseSyntheticConfig config;
  config.samples = samples;
  config.features = features;
  config.nonzeros = nonzeros;
  config.label_noise = noise;
  config.seed = 5;
  return config;
}

// Plain sequential SGD, written from the formula in hogwild.h without atomics or threads.
std::vector<float> sequential_sgd(const data::SparseDataset& data, LinearLoss loss, float l2,
                                  std::uint64_t seed, const std::vector<float>& lrs) {
  std::vector<float> w(static_cast<std::size_t>(data.num_features), 0.0f);
  const data::ShuffledSampler sampler(data.size(), seed);
  for (std::size_t epoch = 0; epoch < lrs.size(); ++epoch) {
    const float lr = lrs[epoch];
    for (const std::int64_t i : sampler.epoch_order(static_cast<std::int64_t>(epoch))) {
      const data::SparseRow row = data.row(i);
      float z = 0.0f;
      for (std::size_t p = 0; p < row.columns.size(); ++p) {
        z += w[static_cast<std::size_t>(row.columns[p])] * row.values[p];
      }
      const float y = data.labels[static_cast<std::size_t>(i)];
      const float g = y * linear_loss_derivative(loss, y * z);
      for (std::size_t p = 0; p < row.columns.size(); ++p) {
        float& wj = w[static_cast<std::size_t>(row.columns[p])];
        wj = wj - lr * (g * row.values[p] + l2 * wj);
      }
    }
  }
  return w;
}

class HogwildLoss : public ::testing::TestWithParam<LinearLoss> {};

TEST_P(HogwildLoss, OneThreadIsSequentialSgdBitForBit) {
  const LinearLoss loss = GetParam();
  const data::SparseDataset train = data::make_sparse_synthetic(problem(3000, 400, 8, 0.05));
  HogwildOptions options;
  options.loss = loss;
  options.threads = 1;
  options.l2 = 1e-3f;
  options.seed = 17;
  Hogwild hogwild(train, options);
  const std::vector<float> lrs{0.5f, 0.25f, 0.125f};
  for (std::size_t e = 0; e < lrs.size(); ++e) {
    const HogwildEpoch epoch = hogwild.run_epoch(static_cast<std::int64_t>(e), lrs[e]);
    EXPECT_EQ(epoch.updates, 3000);
    EXPECT_EQ(epoch.thread_updates, (std::vector<std::int64_t>{3000}));
  }
  const std::vector<float> expected = sequential_sgd(train, loss, 1e-3f, 17, lrs);
  const std::vector<float> got(hogwild.weights().begin(), hogwild.weights().end());
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t j = 0; j < got.size(); ++j) {
    ASSERT_EQ(got[j], expected[j]) << "weight " << j;  // exactly: same operations, same order
  }
  EXPECT_NE(std::count(got.begin(), got.end(), 0.0f), static_cast<std::ptrdiff_t>(got.size()));
}

// Trains `epochs` epochs with `threads` threads at lr 0.5 decaying 0.8x per epoch and returns the
// final evaluation on the training set.
LinearEvaluation train_with(const data::SparseDataset& train, LinearLoss loss, int threads,
                            int epochs) {
  HogwildOptions options;
  options.loss = loss;
  options.threads = threads;
  options.l2 = 1e-4f;
  options.seed = 1;
  Hogwild hogwild(train, options);
  float lr = 0.5f;
  std::int64_t updates = 0;
  for (int e = 0; e < epochs; ++e) {
    const HogwildEpoch epoch = hogwild.run_epoch(e, lr);
    EXPECT_EQ(
        std::accumulate(epoch.thread_updates.begin(), epoch.thread_updates.end(), std::int64_t{0}),
        train.size());
    updates += epoch.updates;
    lr *= 0.8f;
  }
  EXPECT_EQ(updates, train.size() * epochs);
  return hogwild.evaluate(train);
}

TEST_P(HogwildLoss, TwoAndFourThreadsReachTheOneThreadLoss) {
  const LinearLoss loss = GetParam();
  // k = 10 of d = 20000: two concurrent updates share a feature with probability ~ 0.5%.
  const data::SparseDataset train = data::make_sparse_synthetic(problem(20000, 20000, 10));
  const LinearEvaluation start = Hogwild(train, HogwildOptions{loss}).evaluate(train);
  const LinearEvaluation one = train_with(train, loss, 1, 5);
  // Training must have done something for the comparison to mean anything.
  EXPECT_LT(one.loss, 0.7 * start.loss);
  EXPECT_GT(one.accuracy, 0.85);
  for (int threads : {2, 4}) {
    const LinearEvaluation many = train_with(train, loss, threads, 5);
    EXPECT_NEAR(many.loss, one.loss, 0.05 * one.loss + 0.005) << threads << " threads";
    EXPECT_NEAR(many.accuracy, one.accuracy, 0.01) << threads << " threads";
  }
}

TEST_P(HogwildLoss, DenseProblemWithConstantCollisionsStillConverges) {
  // k = 8 of d = 16: every pair of concurrent updates collides. Lost updates slow SGD down but
  // the iterates stay bounded and the loss still falls well below its start.
  const LinearLoss loss = GetParam();
  const data::SparseDataset train = data::make_sparse_synthetic(problem(4000, 16, 8));
  const LinearEvaluation start = Hogwild(train, HogwildOptions{loss}).evaluate(train);
  const LinearEvaluation one = train_with(train, loss, 1, 3);
  const LinearEvaluation four = train_with(train, loss, 4, 3);
  EXPECT_LT(four.loss, 0.6 * start.loss);
  EXPECT_GT(four.accuracy, 0.9);
  EXPECT_NEAR(four.accuracy, one.accuracy, 0.05);
}

INSTANTIATE_TEST_SUITE_P(LogisticAndSvm, HogwildLoss,
                         ::testing::Values(LinearLoss::kLogistic, LinearLoss::kHinge),
                         [](const auto& param_info) {
                           return std::string(linear_loss_name(param_info.param));
                         });

TEST(Hogwild, EvaluateAtZeroAndAtTheSeparatingVector) {
  const auto config = problem(500, 100, 5);
  const data::SparseDataset data = data::make_sparse_synthetic(config);
  Hogwild logistic(data, HogwildOptions{LinearLoss::kLogistic, 2});
  EXPECT_NEAR(logistic.evaluate(data).loss, std::log(2.0), 1e-12);  // w = 0
  Hogwild svm(data, HogwildOptions{LinearLoss::kHinge, 3});
  EXPECT_DOUBLE_EQ(svm.evaluate(data).loss, 1.0);
  const std::vector<float> w_star = data::sparse_synthetic_weights(config);
  std::copy(w_star.begin(), w_star.end(), logistic.weights().begin());
  EXPECT_DOUBLE_EQ(logistic.evaluate(data).accuracy, 1.0);  // w* separates noise-free data
  for (float& w : logistic.weights()) w = -w;
  EXPECT_DOUBLE_EQ(logistic.evaluate(data).accuracy, 0.0);
}

TEST(Hogwild, LossDerivativesMatchFiniteDifferences) {
  const double h = 1e-3;
  for (double m : {-30.0, -3.0, -0.7, 0.0, 0.4, 2.5, 30.0}) {
    const double numeric =
        (linear_loss(LinearLoss::kLogistic, m + h) - linear_loss(LinearLoss::kLogistic, m - h)) /
        (2 * h);
    EXPECT_NEAR(linear_loss_derivative(LinearLoss::kLogistic, static_cast<float>(m)), numeric, 1e-5)
        << "margin " << m;
    if (std::abs(m - 1.0) > 2 * h) {  // the hinge's kink is at m = 1
      const double hinge =
          (linear_loss(LinearLoss::kHinge, m + h) - linear_loss(LinearLoss::kHinge, m - h)) /
          (2 * h);
      EXPECT_NEAR(linear_loss_derivative(LinearLoss::kHinge, static_cast<float>(m)), hinge, 1e-9);
    }
  }
  EXPECT_FLOAT_EQ(linear_loss_derivative(LinearLoss::kHinge, 1.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(linear_loss(LinearLoss::kLogistic, -1000.0)));
  EXPECT_EQ(linear_loss_derivative(LinearLoss::kLogistic, 1000.0f), 0.0f);
}

TEST(Hogwild, RejectsBadOptionsAndLabels) {
  const data::SparseDataset data = data::make_sparse_synthetic(problem(10, 10, 2));
  EXPECT_THROW(Hogwild(data, HogwildOptions{LinearLoss::kLogistic, 0}), ConfigError);
  HogwildOptions negative_l2;
  negative_l2.l2 = -1.0f;
  EXPECT_THROW(Hogwild(data, negative_l2), ConfigError);
  data::SparseDataset zero_one = data;
  zero_one.labels[3] = 0.0f;
  try {
    Hogwild bad(zero_one, HogwildOptions{});
    ADD_FAILURE() << "a 0 label was accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("sample 3 has label 0"));
  }
  EXPECT_EQ(linear_loss_from_name("svm"), LinearLoss::kHinge);
  EXPECT_THROW(linear_loss_from_name("ridge"), ConfigError);
}

}  // namespace
}  // namespace dtrain::parallel
