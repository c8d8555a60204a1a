// Each attack against its formula: sign flip and scaling, seeded Gaussian noise, "a little is
// enough" (the paper's z, mu - z sigma from the honest gradients or from given statistics),
// inner-product manipulation; and the parser's names and errors.
#include "dtrain/aggregate/attack.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::aggregate {
namespace {

const std::vector<float> kOwn = {1.0f, -2.0f, 0.5f};
// Three honest gradients: per coordinate mean {2, 0, 1}, sample std {1, 2, 0}.
const std::vector<std::vector<float>> kHonest = {{1, -2, 1}, {2, 0, 1}, {3, 2, 1}};

std::vector<float> apply(const std::string& spec, AttackInput input, std::int64_t d = 3) {
  std::vector<const float*> honest;
  for (const auto& g : kHonest) honest.push_back(g.data());
  if (input.honest.empty() && input.honest_mean == nullptr) input.honest = honest;
  if (input.own == nullptr) input.own = kOwn.data();
  std::vector<float> out(static_cast<std::size_t>(d));
  parse_attack(spec, 9)->apply(input, d, out.data());
  return out;
}

TEST(AttackTest, SignFlipAndScale) {
  EXPECT_EQ(apply("signflip", {}), (std::vector<float>{-1, 2, -0.5f}));
  EXPECT_EQ(apply("signflip:4", {}), (std::vector<float>{-4, 8, -2}));
  EXPECT_EQ(apply("scale:-3", {}), (std::vector<float>{-3, 6, -1.5f}));
  EXPECT_EQ(apply("scale:100", {}), (std::vector<float>{100, -200, 50}));
  EXPECT_FALSE(parse_attack("signflip")->needs_honest());
}

TEST(AttackTest, NoiseIsSeededNormalWithSigma) {
  constexpr std::int64_t kD = 200000;
  AttackInput input;
  input.step = 5;
  input.rank = 2;
  const std::vector<float> a = apply("noise:2", input, kD);
  EXPECT_EQ(apply("noise:2", input, kD), a);  // a function of (seed, step, rank)
  input.rank = 3;
  EXPECT_NE(apply("noise:2", input, kD), a);
  double sum = 0.0;
  double squares = 0.0;
  for (const float x : a) {
    sum += x;
    squares += static_cast<double>(x) * x;
  }
  EXPECT_NEAR(sum / kD, 0.0, 0.02);
  EXPECT_NEAR(std::sqrt(squares / kD), 2.0, 0.02);
}

TEST(AttackTest, AlieZFollowsThePaper) {
  EXPECT_NEAR(normal_quantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(normal_quantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(normal_quantile(0.025), -1.959963984540054, 1e-9);
  // n = 8, f = 2: s = floor(8/2 + 1) - 2 = 3, z = Phi^-1(5/8).
  EXPECT_NEAR(alie_z(8, 2), 0.318639363964375, 1e-9);
  // n = 50, f = 24 (the paper's setting): s = 2, z = Phi^-1(48/50).
  EXPECT_NEAR(alie_z(50, 24), 1.750686071252170, 1e-9);
  EXPECT_THROW(alie_z(8, 0), ConfigError);
  try {
    alie_z(8, 5);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("n = 8 workers and f = 5 attackers"), std::string::npos)
        << e.what();
  }
}

TEST(AttackTest, AlieIsMeanMinusZStd) {
  AttackInput input;
  input.workers = 8;
  input.byzantine = 2;
  const double z = alie_z(8, 2);
  const std::vector<float> out = apply("alie", input);
  EXPECT_FLOAT_EQ(out[0], static_cast<float>(2 - z * 1));
  EXPECT_FLOAT_EQ(out[1], static_cast<float>(0 - z * 2));
  EXPECT_FLOAT_EQ(out[2], 1.0f);
  EXPECT_EQ(apply("alie:1.5", {}), (std::vector<float>{0.5f, -3, 1}));
  // From given statistics instead of the gradients.
  const std::vector<float> mean = {2, 0, 1};
  const std::vector<float> std = {1, 2, 0};
  AttackInput stats;
  stats.honest_mean = mean.data();
  stats.honest_std = std.data();
  EXPECT_EQ(apply("alie:1.5", stats), (std::vector<float>{0.5f, -3, 1}));
  stats.honest_std = nullptr;
  EXPECT_THROW(apply("alie:1.5", stats), ShapeError);
  EXPECT_TRUE(parse_attack("alie")->needs_honest());
}

TEST(AttackTest, IpmIsMinusEpsilonTimesTheHonestMean) {
  EXPECT_EQ(apply("ipm:0.5", {}), (std::vector<float>{-1, 0, -0.5f}));
  const std::vector<float> out = apply("ipm", {});  // eps = 0.1
  EXPECT_FLOAT_EQ(out[0], -0.2f);
  EXPECT_FLOAT_EQ(out[2], -0.1f);
  EXPECT_EQ(parse_attack("ipm")->name(), "ipm:0.1");
}

TEST(AttackTest, ParserNamesAndErrors) {
  for (const std::string spec :
       {"signflip", "signflip:2", "scale:-4", "noise:1", "alie", "alie:0.5", "ipm:0.1"}) {
    EXPECT_EQ(parse_attack(spec)->name(), spec);
  }
  for (const std::string spec : {"flip", "scale", "scale:x", "noise", "noise:0", "signflip:0",
                                 "signflip:-1", "ipm:-1", "alie:z"}) {
    try {
      parse_attack(spec);
      ADD_FAILURE() << spec << ": no error";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind("attack '" + spec + "': ", 0), 0u) << message;
      EXPECT_NE(message.find("accepted: signflip[:<c > 0>], scale:<c>"), std::string::npos)
          << message;
    }
  }
}

}  // namespace
}  // namespace dtrain::aggregate
