#include "dtrain/nn/init.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/base/error.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;

struct Moments {
  double mean = 0.0;
  double stddev = 0.0;
};

Moments moments(const tensor::Tensor& t) {
  double sum = 0.0;
  double sum_sq = 0.0;
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    sum += t.data()[i];
    sum_sq += static_cast<double>(t.data()[i]) * t.data()[i];
  }
  const double n = static_cast<double>(t.numel());
  const double mean = sum / n;
  return {mean, std::sqrt(sum_sq / n - mean * mean)};
}

TEST(InitTest, ParsesTheThreeNames) {
  EXPECT_EQ(parse_init("normal"), InitKind::kNormal);
  EXPECT_EQ(parse_init("xavier"), InitKind::kXavier);
  EXPECT_EQ(parse_init("he"), InitKind::kHe);
  for (InitKind kind : {InitKind::kNormal, InitKind::kXavier, InitKind::kHe, InitKind::kUniform}) {
    EXPECT_EQ(parse_init(init_name(kind)), kind);
  }
}

TEST(InitTest, UnknownNameIsAConfigErrorListingTheAcceptedNames) {
  try {
    parse_init("kaiming");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.init"));
    EXPECT_THAT(e.what(), HasSubstr("'kaiming'"));
    EXPECT_THAT(e.what(), HasSubstr("normal, xavier, he"));
  }
}

TEST(InitTest, StandardDeviationsFollowTheFormulas) {
  // he: sqrt(2 / 50) = 0.2; xavier: sqrt(2 / (30 + 70)) = sqrt(0.02); normal: sigma as given.
  EXPECT_FLOAT_EQ(init_std(InitKind::kHe, 50, 999, 0.5f), 0.2f);
  EXPECT_FLOAT_EQ(init_std(InitKind::kXavier, 30, 70, 0.5f), std::sqrt(0.02f));
  EXPECT_FLOAT_EQ(init_std(InitKind::kNormal, 30, 70, 0.05f), 0.05f);
  EXPECT_THROW(init_std(InitKind::kNormal, 30, 70, -1.0f), ConfigError);
  EXPECT_THROW(init_std(InitKind::kNormal, 30, 70, std::nanf("")), ConfigError);
}

// n = 200000 draws: the sample mean has standard error std / sqrt(n) = std * 0.0022, the sample
// standard deviation a relative standard error of about 1 / sqrt(2n) = 0.0016. Bounds of five
// standard errors fail by chance with probability below 1e-6.
TEST(InitTest, SampleMomentsMatchEachKind) {
  const std::int64_t n = 200000;
  const double se = 1.0 / std::sqrt(static_cast<double>(n));
  struct Case {
    InitKind kind;
    std::int64_t fan_in, fan_out;
    float sigma;
    double expected_std;
  };
  for (const Case& c : {Case{InitKind::kNormal, 10, 10, 0.05f, 0.05},
                        Case{InitKind::kXavier, 300, 100, 0.0f, std::sqrt(2.0 / 400.0)},
                        Case{InitKind::kHe, 200, 10, 0.0f, std::sqrt(2.0 / 200.0)},
                        Case{InitKind::kUniform, 144, 10, 0.0f, std::sqrt(1.0 / (3.0 * 144.0))}}) {
    tensor::Tensor w = tensor::Tensor::zeros({n / 100, 100});
    Rng rng(42, 1);
    init_weights(w, c.fan_in, c.fan_out, c.kind, c.sigma, rng);
    const Moments m = moments(w);
    SCOPED_TRACE(std::string(init_name(c.kind)));
    EXPECT_NEAR(m.mean, 0.0, 5.0 * c.expected_std * se);
    EXPECT_NEAR(m.stddev, c.expected_std, 5.0 * c.expected_std * se / std::sqrt(2.0) + 1e-7);
  }
}

TEST(InitTest, SameSeedGivesTheSameWeightsAndAnotherStreamDifferentOnes) {
  tensor::Tensor a = tensor::Tensor::zeros({17, 9});
  tensor::Tensor b = tensor::Tensor::zeros({17, 9});
  tensor::Tensor c = tensor::Tensor::zeros({17, 9});
  Rng rng_a(7, 3);
  Rng rng_b(7, 3);
  Rng rng_c(7, 4);
  init_weights(a, 9, 17, InitKind::kHe, 0.0f, rng_a);
  init_weights(b, 9, 17, InitKind::kHe, 0.0f, rng_b);
  init_weights(c, 9, 17, InitKind::kHe, 0.0f, rng_c);
  EXPECT_EQ(a.to_vector(), b.to_vector());
  EXPECT_NE(a.to_vector(), c.to_vector());
}

}  // namespace
}  // namespace dtrain::nn

namespace dtrain::nn {
namespace {

// PyTorch's nn.Linear default: weights and biases uniform in +-1/sqrt(fan_in) (fan_in 16: 0.25).
TEST(InitTest, UniformMatchesPyTorchsDefaultBoundsForWeightsAndBiases) {
  tensor::Tensor w = tensor::Tensor::zeros({64, 16});
  tensor::Tensor b = tensor::Tensor::zeros({64});
  Rng rng(5, 1);
  init_weights(w, 16, 64, InitKind::kUniform, 0.0f, rng);
  init_bias(b, 16, InitKind::kUniform, rng);
  float w_max = 0.0f, b_max = 0.0f;
  for (float v : w.to_vector()) w_max = std::max(w_max, std::fabs(v));
  for (float v : b.to_vector()) b_max = std::max(b_max, std::fabs(v));
  EXPECT_LE(w_max, 0.25f);
  EXPECT_GT(w_max, 0.2f);  // 1024 draws reach near the bound
  EXPECT_LE(b_max, 0.25f);
  EXPECT_GT(b_max, 0.15f);  // 64 draws: P(all below 0.15) = 0.6^64, negligible
}

TEST(InitTest, OtherKindsStartBiasesAtZero) {
  for (InitKind kind : {InitKind::kNormal, InitKind::kXavier, InitKind::kHe}) {
    tensor::Tensor b = tensor::Tensor::from({3}, {1.0f, 2.0f, 3.0f});
    Rng rng(5, 1);
    init_bias(b, 16, kind, rng);
    EXPECT_EQ(b.to_vector(), (std::vector<float>{0.0f, 0.0f, 0.0f}));
  }
}

}  // namespace
}  // namespace dtrain::nn
