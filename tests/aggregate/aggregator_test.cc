// Each aggregator against its definition on hand-made inputs: the median of an even count, the
// trimmed mean at the edges of beta, Krum's selection with one outlier and its scores, Multi-Krum's
// average, centered clipping (tau large = the mean; tau small moves at most tau per iteration;
// the automatic tau: the lower median distance, bounded outliers, scale-free), bucketing (s = 1 is
// the inner aggregator; buckets are means of the shuffled inputs).
#include "dtrain/aggregate/aggregator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/aggregate/bucketing.h"
#include "dtrain/aggregate/centered_clip.h"
#include "dtrain/aggregate/krum.h"
#include "dtrain/aggregate/mean.h"
#include "dtrain/aggregate/median.h"
#include "dtrain/aggregate/trimmed_mean.h"
#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::aggregate {
namespace {

using Rows = std::vector<std::vector<float>>;

std::vector<float> run(Aggregator& aggregator, const Rows& rows) {
  std::vector<const float*> inputs;
  for (const auto& row : rows) inputs.push_back(row.data());
  const std::int64_t d = rows.empty() ? 0 : static_cast<std::int64_t>(rows[0].size());
  std::vector<float> out(static_cast<std::size_t>(d), -999.0f);
  aggregator.aggregate(inputs, d, out.data());
  return out;
}

Rows random_rows(int n, int d, std::uint64_t seed) {
  Rng rng(seed);
  Rows rows(static_cast<std::size_t>(n), std::vector<float>(static_cast<std::size_t>(d)));
  for (auto& row : rows) {
    for (float& x : row) x = rng.normal();
  }
  return rows;
}

double norm(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t k = 0; k < a.size(); ++k) sum += (a[k] - b[k]) * (a[k] - b[k]);
  return std::sqrt(sum);
}

TEST(MeanTest, AveragesAndTakesOneRowBuffer) {
  Mean mean;
  EXPECT_EQ(run(mean, {{1, 2}, {3, 4}, {5, 9}}), (std::vector<float>{3, 5}));
  const std::vector<float> rows = {1, 2, 3, 4, 5, 9};  // (3, 2)
  std::vector<float> out(2);
  mean.aggregate(rows.data(), 3, 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{3, 5}));
  EXPECT_EQ(mean.tolerated(10), 0);
}

TEST(MedianTest, OddCountIsTheMiddleValueEvenCountTheMeanOfTheTwoMiddle) {
  Median median;
  EXPECT_EQ(run(median, {{5, -1}, {1, 7}, {3, 2}}), (std::vector<float>{3, 2}));
  // Columns {1, 2, 10, 4} -> (2 + 4)/2 and {0, 0, 1, 1} -> 0.5.
  EXPECT_EQ(run(median, {{1, 0}, {2, 0}, {10, 1}, {4, 1}}), (std::vector<float>{3, 0.5f}));
  EXPECT_EQ(run(median, {{7}}), std::vector<float>{7});
  EXPECT_EQ(run(median, {{7}, {8}}), std::vector<float>{7.5f});
  EXPECT_EQ(median.tolerated(8), 3);
  EXPECT_EQ(median.tolerated(9), 4);
}

TEST(MedianTest, NanCountsAsPlusInfinity) {
  Median median;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(run(median, {{nan}, {1}, {2}}), std::vector<float>{2});
  EXPECT_EQ(run(median, {{nan}, {nan}, {-3}, {1}, {2}}), std::vector<float>{2});
}

TEST(TrimmedMeanTest, DropsFloorBetaNAtEachEnd) {
  // n = 5, beta = 0.2: b = 1; column {1, 100, 3, -50, 5} -> mean of {1, 3, 5}.
  TrimmedMean trimmed(0.2);
  EXPECT_EQ(trimmed.trimmed(5), 1);
  EXPECT_EQ(run(trimmed, {{1}, {100}, {3}, {-50}, {5}}), std::vector<float>{3});
  EXPECT_EQ(trimmed.name(), "trimmed:0.2");
  EXPECT_EQ(trimmed.tolerated(10), 2);
}

TEST(TrimmedMeanTest, AtTheEdgesOfBetaItIsTheMeanOrTheMedian) {
  const Rows rows = {{1}, {100}, {3}, {-50}, {5}};
  TrimmedMean none(0.0);
  EXPECT_EQ(run(none, rows), std::vector<float>{59.0f / 5});
  TrimmedMean just_below(0.19);  // floor(0.95) = 0: nothing dropped
  EXPECT_EQ(just_below.trimmed(5), 0);
  EXPECT_EQ(run(just_below, rows), std::vector<float>{59.0f / 5});
  TrimmedMean most(0.4);  // b = 2 of 5: the median
  EXPECT_EQ(run(most, rows), std::vector<float>{3});
  TrimmedMean quarter(0.25);  // b = 1 of 4: the mean of the two middle values = the median
  EXPECT_EQ(run(quarter, {{1}, {2}, {10}, {4}}), std::vector<float>{3});
  TrimmedMean almost_half(0.49);  // b = 0 of 2, b = 49 of 100 (2 kept)
  EXPECT_EQ(run(almost_half, {{1}, {2}}), std::vector<float>{1.5f});
  Rows hundred;
  for (int i = 0; i < 100; ++i) hundred.push_back({static_cast<float>((i * 37) % 100)});
  EXPECT_EQ(run(almost_half, hundred), std::vector<float>{49.5f});
}

// Four points of a unit square, its centre, and an outlier: (x0..x5).
const Rows kSquare = {{0, 0}, {1, 0}, {0, 1}, {1, 1}, {0.5f, 0.5f}, {100, 100}};

TEST(KrumTest, SelectsTheInputClosestToItsNeighboursNotTheOutlier) {
  Krum krum(1);  // n - f - 2 = 3 closest
  EXPECT_EQ(run(krum, kSquare), (std::vector<float>{0.5f, 0.5f}));
  // The centre: 3 x 0.5; a corner: 0.5 + 1 + 1; the outlier: its 3 closest are x3 (2 x 99^2),
  // x4 (2 x 99.5^2) and x1 (99^2 + 100^2).
  const std::vector<double> scores = {2.5, 2.5, 2.5, 2.5, 1.5, 19602 + 19800.5 + 19801};
  EXPECT_EQ(krum.scores(), scores);
  EXPECT_EQ(krum.selected(), std::vector<int>{4});
  EXPECT_EQ(krum.tolerated(6), 1);
}

TEST(KrumTest, TiesGoToTheLowerIndex) {
  // f = 0, 3 closest: x0, x1, x3 and x4 all score 0 + 1 + 1 = 2, x2 scores 1 + 1 + 4.
  Krum krum(0);
  EXPECT_EQ(run(krum, {{0}, {1}, {2}, {1}, {0}}), std::vector<float>{0});
  EXPECT_EQ(krum.scores(), (std::vector<double>{2, 2, 6, 2, 2}));
  EXPECT_EQ(krum.selected(), std::vector<int>{0});
  EXPECT_EQ(run(krum, {{1}, {0}, {2}, {1}, {0}}), std::vector<float>{1});
}

TEST(KrumTest, MultiKrumAveragesTheMBest) {
  Krum three(1, 3, true);  // x4, then the corners tie at 2.5: x0, x1
  const std::vector<float> out = run(three, kSquare);
  EXPECT_EQ(three.selected(), (std::vector<int>{4, 0, 1}));
  EXPECT_FLOAT_EQ(out[0], 0.5f);
  EXPECT_FLOAT_EQ(out[1], 0.5f / 3);
  EXPECT_EQ(three.name(), "multikrum:3");
  Krum rest(1, 0, true);  // m = n - f = 5: everything but the outlier
  EXPECT_EQ(run(rest, kSquare), (std::vector<float>{0.5f, 0.5f}));
  EXPECT_EQ(rest.name(), "multikrum");
  Krum all(0, 6, true);  // m = n: the mean
  EXPECT_EQ(run(all, kSquare), (std::vector<float>{102.5f / 6, 102.5f / 6}));
}

TEST(KrumTest, NeedsMoreThanTwoFPlusTwoInputs) {
  Krum krum(2);
  try {
    run(krum, kSquare);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "aggregator 'krum' with f = 2 Byzantine inputs needs n > 2f + 2 = 6 inputs, got "
                 "n = 6");
  }
  EXPECT_NO_THROW(krum.check_inputs(7));
  EXPECT_THROW(Krum(0, 7, true).check_inputs(6), ConfigError);
}

TEST(CenteredClipTest, LargeTauIsTheMeanAfterOneIteration) {
  const Rows rows = random_rows(7, 33, 1);
  CenteredClip clip(1e9);
  Mean mean;
  const std::vector<float> got = run(clip, rows);
  const std::vector<float> want = run(mean, rows);
  for (std::size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6) << k;
}

TEST(CenteredClipTest, SmallTauMovesTheCentreByAtMostTauPerIteration) {
  const Rows rows = random_rows(6, 20, 2);
  for (const int iterations : {1, 3}) {
    CenteredClip clip(0.05, iterations);
    std::vector<double> before(20, 0.0);
    for (int call = 0; call < 5; ++call) {
      run(clip, rows);
      const double moved = norm(clip.center(), before);
      EXPECT_LE(moved, 0.05 * iterations + 1e-12) << "call " << call;
      EXPECT_GT(moved, 0.05 * 0.1) << "call " << call;  // the inputs are far: it does move
      before = clip.center();
    }
  }
  // Equal inputs at distance 10 from the centre: each iteration moves exactly tau toward them.
  CenteredClip clip(1.0, 2);
  const std::vector<float> out = run(clip, {{6, 8}, {6, 8}, {6, 8}});
  EXPECT_NEAR(out[0], 6 * 0.2, 1e-6);
  EXPECT_NEAR(out[1], 8 * 0.2, 1e-6);
}

TEST(CenteredClipTest, StartsFromTheGivenCentreAndBoundsTheOutliersPull) {
  // Four honest inputs at (1, 1), one Byzantine far away; from the honest centre the outlier
  // pulls by exactly tau / n toward itself.
  CenteredClip clip(1.0);
  const std::vector<float> center = {1, 1};
  clip.set_center(center);
  const std::vector<float> out = run(clip, {{1, 1}, {1, 1}, {1000, 1000}, {1, 1}, {1, 1}});
  const double step = 1.0 / 5 / std::sqrt(2.0);
  EXPECT_NEAR(out[0], 1 + step, 1e-6);
  EXPECT_NEAR(out[1], 1 + step, 1e-6);
  EXPECT_EQ(clip.name(), "cclip:1");
  // The next call starts where this one ended.
  EXPECT_NEAR(clip.center()[0], 1 + step, 1e-12);
  EXPECT_THROW(run(clip, {{1, 2, 3}}), ShapeError);
}

TEST(CenteredClipTest, NonFiniteInputsDoNotPull) {
  // With the automatic tau, two of three distances are infinite: tau is infinite too, and the
  // finite input is not clipped.
  for (const std::optional<double> tau : {std::optional<double>(1.0), std::optional<double>()}) {
    CenteredClip clip(tau);
    clip.set_center(std::vector<float>{0.5f});
    const float inf = std::numeric_limits<float>::infinity();
    const std::vector<float> out =
        run(clip, {{0.25f}, {std::numeric_limits<float>::quiet_NaN()}, {inf}});
    EXPECT_EQ(out, std::vector<float>{0.5f - 0.25f / 3}) << clip.name();
  }
}

TEST(CenteredClipTest, AutoTauIsTheLowerMedianDistanceAndClipsOnlyWhatIsFarther) {
  // From the centre 0: four inputs at distance 5 and one at 10. tau = the 3rd smallest of
  // (5, 5, 5, 5, 10) = 5, so the far input pulls with half its length.
  CenteredClip clip(std::nullopt);
  const std::vector<float> out = run(clip, {{3, 4}, {4, 3}, {0, 10}, {5, 0}, {0, 5}});
  EXPECT_DOUBLE_EQ(clip.last_tau(), 5.0);
  EXPECT_NEAR(out[0], (3 + 4 + 0 + 5 + 0) / 5.0, 1e-6);
  EXPECT_NEAR(out[1], (4 + 3 + 5 + 0 + 5) / 5.0, 1e-6);
  EXPECT_EQ(clip.name(), "cclip:auto");
  // Equidistant inputs are not clipped at all: the mean.
  CenteredClip equal(std::nullopt);
  const std::vector<float> mean = run(equal, {{3, 4}, {4, 3}, {5, 0}, {0, 5}});
  EXPECT_NEAR(mean[0], 3.0, 1e-6);
  EXPECT_NEAR(mean[1], 3.0, 1e-6);
}

TEST(CenteredClipTest, AutoTauBoundsFarOutliersWhateverTheirDistance) {
  // Four honest inputs at distance 1 around the centre (1, 1), whose pulls cancel, and two
  // Byzantine ones D away along x. tau = the 3rd smallest distance = 1 for every D, so each
  // outlier pulls by tau / n = 1/6: the output is (1 + 2/6, 1) for D = 10 and for D = 1e6 (the
  // mean moves by 2 D / 6).
  for (const float far : {10.0f, 1e6f}) {
    CenteredClip clip(std::nullopt);
    clip.set_center(std::vector<float>{1, 1});
    const std::vector<float> out =
        run(clip, {{2, 1}, {1, 2}, {0, 1}, {1, 0}, {1 + far, 1}, {1 + far, 1}});
    EXPECT_DOUBLE_EQ(clip.last_tau(), 1.0) << far;
    EXPECT_NEAR(out[0], 1 + 2.0 / 6, 1e-6) << far;
    EXPECT_NEAR(out[1], 1.0, 1e-6) << far;
  }
}

TEST(CenteredClipTest, AutoTauIsScaleFree) {
  // c x_i from the centre c v gives c out; a fixed tau does not (it clips in absolute units).
  const Rows rows = random_rows(8, 40, 4);
  const std::vector<float> center(40, 0.5f);
  const float c = 1024.0f;  // a power of two: scaling the inputs is exact
  Rows scaled = rows;
  for (auto& row : scaled) {
    for (float& x : row) x *= c;
  }
  std::vector<float> scaled_center = center;
  for (float& x : scaled_center) x *= c;
  for (const int iterations : {1, 3}) {
    CenteredClip clip(std::nullopt, iterations);
    CenteredClip big(std::nullopt, iterations);
    clip.set_center(center);
    big.set_center(scaled_center);
    const std::vector<float> out = run(clip, rows);
    const std::vector<float> scaled_out = run(big, scaled);
    for (std::size_t k = 0; k < out.size(); ++k) {
      EXPECT_NEAR(scaled_out[k], c * out[k], 1e-5 * c) << k;
    }
    EXPECT_NEAR(big.last_tau(), c * clip.last_tau(), 1e-9 * c * clip.last_tau());
  }
}

// An inner aggregator that records the bucket means it is given and returns the first.
class Recorder final : public Aggregator {
 public:
  std::string name() const override { return "recorder"; }
  int tolerated(int n) const override { return n; }
  Rows seen;

 protected:
  void run(Inputs inputs, std::int64_t d, float* out) override {
    seen.clear();
    for (const float* x : inputs) seen.emplace_back(x, x + d);
    std::copy_n(inputs[0], d, out);
  }
};

TEST(BucketingTest, BucketsAreMeansOfTheShuffledInputs) {
  const Rows rows = random_rows(8, 5, 3);
  auto recorder = std::make_unique<Recorder>();
  Recorder& inner = *recorder;
  Bucketing bucketing(3, std::move(recorder), 42);
  EXPECT_EQ(bucketing.buckets(8), 3);
  run(bucketing, rows);
  std::vector<int> sorted = bucketing.order();
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  ASSERT_EQ(inner.seen.size(), 3u);
  for (int b = 0; b < 3; ++b) {
    const int first = 3 * b;
    const int last = std::min(8, first + 3);
    for (int k = 0; k < 5; ++k) {
      double sum = 0.0;
      for (int i = first; i < last; ++i) sum += rows[bucketing.order()[i]][k];
      EXPECT_FLOAT_EQ(inner.seen[b][k], static_cast<float>(sum / (last - first)))
          << "bucket " << b << " coordinate " << k;
    }
  }
  // Each call draws its own shuffle, the same for the same seed.
  const std::vector<int> first_order = bucketing.order();
  run(bucketing, rows);
  EXPECT_NE(bucketing.order(), first_order);
  Bucketing again(3, std::make_unique<Mean>(), 42);
  run(again, rows);
  EXPECT_EQ(again.order(), first_order);
  EXPECT_EQ(bucketing.name(), "bucket:3,recorder");
}

TEST(BucketingTest, SizeOneIsTheInnerAggregator) {
  const Rows rows = random_rows(9, 17, 4);
  {
    Bucketing bucketing(1, std::make_unique<Median>(), 7);
    Median median;
    EXPECT_EQ(run(bucketing, rows), run(median, rows));
  }
  {
    Bucketing bucketing(1, std::make_unique<Krum>(2), 7);
    Krum krum(2);
    EXPECT_EQ(run(bucketing, rows), run(krum, rows));
  }
  {
    Bucketing bucketing(1, std::make_unique<TrimmedMean>(0.2), 7);
    TrimmedMean trimmed(0.2);
    const std::vector<float> got = run(bucketing, rows);
    const std::vector<float> want = run(trimmed, rows);
    for (std::size_t k = 0; k < got.size(); ++k) EXPECT_NEAR(got[k], want[k], 1e-6);
  }
}

TEST(BucketingTest, ToleranceAndChecksAreTheInnerOnesOnTheBucketCount) {
  Bucketing bucketing(2, std::make_unique<Krum>(1), 0);
  EXPECT_EQ(bucketing.tolerated(8), 1);
  EXPECT_NO_THROW(bucketing.check_inputs(9));  // 5 buckets > 2 x 1 + 2
  try {
    bucketing.check_inputs(8);  // 4 buckets
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(),
                 "bucket:2 makes 4 buckets of 8 inputs: aggregator 'krum' with f = 1 Byzantine "
                 "inputs needs n > 2f + 2 = 4 inputs, got n = 4");
  }
  Bucketing median(2, std::make_unique<Median>(), 0);
  EXPECT_EQ(median.tolerated(8), 1);  // 4 buckets: a median of 4 tolerates 1
}

TEST(AggregatorTest, BadShapesAreErrors) {
  Mean mean;
  std::vector<const float*> none;
  float out = 0;
  EXPECT_THROW(mean.aggregate(none, 1, &out), ConfigError);
  const float x = 1;
  std::vector<const float*> one = {&x, nullptr};
  EXPECT_THROW(mean.aggregate(one, 1, &out), ShapeError);
  std::vector<const float*> fine = {&x};
  EXPECT_THROW(mean.aggregate(fine, -1, &out), ShapeError);
  EXPECT_THROW(mean.aggregate(fine, 1, nullptr), ShapeError);
}

// A checkpoint's state: an aggregator given another's state() computes the next aggregate bit
// for bit as that one does (centered clipping's centre, bucketing's shuffle count); the stateless
// ones keep none.
TEST(AggregatorStateTest, LoadedStateContinuesBitForBit) {
  constexpr int kN = 6;
  constexpr std::int64_t kD = 17;
  Rng rng(7);
  std::vector<std::vector<float>> calls(4, std::vector<float>(kN * kD));
  for (auto& rows : calls) {
    for (float& v : rows) v = static_cast<float>(rng.normal());
  }
  for (const char* spec : {"cclip:0.5", "bucket:2,cclip:0.5:2", "bucket:2,median"}) {
    const auto first = parse_aggregator(spec, 1, 11);
    std::vector<float> out(kD);
    for (int call = 0; call < 3; ++call) first->aggregate(calls[call].data(), kN, kD, out.data());
    const auto second = parse_aggregator(spec, 1, 11);
    second->load_state(first->state());
    std::vector<float> a(kD);
    std::vector<float> b(kD);
    first->aggregate(calls[3].data(), kN, kD, a.data());
    second->aggregate(calls[3].data(), kN, kD, b.data());
    EXPECT_EQ(a, b) << spec;
    // A fresh one (no state) differs: the state is what carries over.
    const auto fresh = parse_aggregator(spec, 1, 11);
    std::vector<float> c(kD);
    fresh->aggregate(calls[3].data(), kN, kD, c.data());
    EXPECT_NE(a, c) << spec;
  }
  for (const char* spec : {"mean", "median", "trimmed:0.2", "krum"}) {
    EXPECT_TRUE(parse_aggregator(spec, 1)->state().empty()) << spec;
  }
  EXPECT_THROW(parse_aggregator("median", 1)->load_state(std::vector<double>{1.0}), InternalError);
  // What fits: a centre of d values (or none yet), behind bucketing's call count.
  const std::vector<double> centre(kD, 0.5);
  EXPECT_TRUE(parse_aggregator("cclip", 1)->state_fits(centre, kD));
  EXPECT_FALSE(parse_aggregator("cclip", 1)->state_fits(centre, kD + 1));
  EXPECT_FALSE(parse_aggregator("median", 1)->state_fits(centre, kD));
  EXPECT_FALSE(parse_aggregator("bucket:2,cclip", 1)->state_fits(centre, kD));
  EXPECT_TRUE(parse_aggregator("bucket:2,median", 1)->state_fits(std::vector<double>{3.0}, kD));
}

}  // namespace
}  // namespace dtrain::aggregate
