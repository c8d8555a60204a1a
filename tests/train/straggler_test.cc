// Straggler specs parse or are rejected with the accepted forms named; delays have the asked
// slowdown, means and determinism.
#include "dtrain/train/straggler.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

TEST(Straggler, ParsesTheThreeForms) {
  EXPECT_EQ(parse_straggler("").kind, StragglerSpec::Kind::kNone);
  const StragglerSpec slow = parse_straggler("rank=2,slowdown=3");
  EXPECT_EQ(slow.kind, StragglerSpec::Kind::kSlowRank);
  EXPECT_EQ(slow.rank, 2);
  EXPECT_EQ(slow.slowdown, 3.0);
  const StragglerSpec exp = parse_straggler("random=exp,mean_ms=5");
  EXPECT_EQ(exp.kind, StragglerSpec::Kind::kExponential);
  EXPECT_EQ(exp.mean_ms, 5.0);
  const StragglerSpec pareto = parse_straggler("random=pareto,mean_ms=2,alpha=2.5");
  EXPECT_EQ(pareto.kind, StragglerSpec::Kind::kPareto);
  EXPECT_EQ(pareto.alpha, 2.5);
}

TEST(Straggler, RejectsMalformedSpecsNamingTheProblem) {
  for (const char* text :
       {"rank=2", "rank=-1,slowdown=2", "rank=1,slowdown=0.5", "random=exp",
        "random=gauss,mean_ms=1", "random=pareto,mean_ms=1,alpha=1", "rank=1,slowdown=2,extra=1",
        "slowdown", "rank=1,rank=2,slowdown=2", "rank=x,slowdown=2", "rank=1,delay_ms=-1"}) {
    try {
      parse_straggler(text);
      ADD_FAILURE() << "accepted '" << text << "'";
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(text));
      EXPECT_THAT(e.what(), HasSubstr("accepted:"));
    }
  }
}

TEST(Straggler, SlowRankWaitsSlowdownMinusOneTimesItsCompute) {
  const StragglerSpec spec = parse_straggler("rank=1,slowdown=3");
  EXPECT_DOUBLE_EQ(straggler_delay_seconds(spec, 0, 1, 7, 0.01), 0.02);
  EXPECT_EQ(straggler_delay_seconds(spec, 0, 0, 7, 0.01), 0.0);
}

TEST(Straggler, FixedDelayAddsToTheSlowdown) {
  const StragglerSpec fixed = parse_straggler("rank=2,delay_ms=40");
  EXPECT_DOUBLE_EQ(straggler_delay_seconds(fixed, 0, 2, 3, 0.01), 0.04);
  EXPECT_EQ(straggler_delay_seconds(fixed, 0, 1, 3, 0.01), 0.0);
  const StragglerSpec both = parse_straggler("rank=0,slowdown=2,delay_ms=5");
  EXPECT_DOUBLE_EQ(straggler_delay_seconds(both, 0, 0, 3, 0.01), 0.015);
}

TEST(Straggler, RandomDelaysHaveTheirMeanAndRepeat) {
  for (const char* text : {"random=exp,mean_ms=5", "random=pareto,mean_ms=5,alpha=3"}) {
    const StragglerSpec spec = parse_straggler(text);
    double sum = 0.0;
    const int n = 200000;
    for (int step = 0; step < n; ++step) sum += straggler_delay_seconds(spec, 9, step % 4, step, 0);
    // Exponential: sd = mean, so the mean of 2e5 draws is within 1% with ~5 sigma to spare;
    // Pareto alpha = 3 has finite variance too (about 0.33 mean^2).
    EXPECT_NEAR(sum / n, 0.005, 0.005 * 0.02) << text;
    EXPECT_EQ(straggler_delay_seconds(spec, 9, 2, 11, 0),
              straggler_delay_seconds(spec, 9, 2, 11, 0));
    EXPECT_NE(straggler_delay_seconds(spec, 9, 2, 11, 0),
              straggler_delay_seconds(spec, 9, 3, 11, 0));
  }
}

}  // namespace
}  // namespace dtrain::train
