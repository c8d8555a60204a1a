// The robust reducer (reducers/robust_reducer.h), ranks as threads, P = 1..6, buckets of odd sizes:
// the mean equals the plain allreduce to rounding; median, trimmed mean, Krum and centered clipping
// equal the aggregator applied by hand to the rows (each rank's gradient times P), bit for bit,
// blocking and async, on every rank; an attack replaces exactly the last f ranks' rows, by its
// formula; the bytes counted are (P-1) x 4n per rank; impossible settings are ConfigErrors with
// the numbers.
#include "dtrain/parallel/reducers/robust_reducer.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"
#include "random_values.h"
#include "reducer_fixture.h"

namespace dtrain::parallel {
namespace {

constexpr std::uint64_t kSeed = 77;

using testing::small_mlp;
using testing::total;

// Buckets of 1, 7 and 1000 elements over one flat buffer (the reducer needs only ranges).
std::vector<GradientBucket> odd_buckets() { return testing::bare_buckets({1, 7, 1000}); }

// Rank r's gradient at a step.
std::vector<float> gradient(int rank, int step, std::int64_t n) {
  return testing::random_values(n, 500 + 10 * rank + step);
}

struct RankRun {
  std::vector<std::vector<float>> results;   // the buffer after each step
  std::vector<std::vector<float>> gathered;  // per bucket: the rows of the last step
  comm::OpStats allgather;                   // counted over all steps
};

std::vector<RankRun> run_reducer(const ReducerFactory& factory, int ranks, int steps, bool async) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  std::vector<RankRun> runs(static_cast<std::size_t>(ranks));
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    auto reducer = factory(ReducerContext{comm, *model, buckets, {}});
    RankRun& run = runs[static_cast<std::size_t>(comm.rank())];
    for (int step = 0; step < steps; ++step) {
      std::vector<float> grads = gradient(comm.rank(), step, total(buckets));
      std::vector<comm::Work> works;
      for (const GradientBucket& b : buckets) {
        if (async) {
          works.push_back(reducer->reduce_async(b, grads.data() + b.offset));
        } else {
          reducer->reduce(b, grads.data() + b.offset);
        }
      }
      for (const comm::Work& w : works) w.wait(std::chrono::seconds(60));
      run.results.push_back(grads);
    }
    if (const auto* robust = dynamic_cast<const RobustReducer*>(reducer.get())) {
      for (std::size_t b = 0; b < buckets.size(); ++b) run.gathered.push_back(robust->gathered(b));
    }
    run.allgather = comm.stats().get("allgather");
  });
  return runs;
}

// The rows of bucket b at a step, by hand: rank r's gradient times P, (P, n) row-major.
std::vector<float> honest_rows(int ranks, int step, const GradientBucket& bucket) {
  std::vector<float> rows;
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> g = gradient(r, step, total(odd_buckets()));
    for (std::int64_t i = 0; i < bucket.count; ++i) {
      rows.push_back(g[static_cast<std::size_t>(bucket.offset + i)] * static_cast<float>(ranks));
    }
  }
  return rows;
}

// The attack by hand on rows (P, n): rows P-f .. P-1 replaced.
void attack_by_hand(const std::string& spec, int f, int ranks, int step, std::int64_t n,
                    std::vector<float>& rows) {
  const auto attack = aggregate::parse_attack(spec, kSeed);
  std::vector<const float*> honest;
  for (int r = 0; r < ranks - f; ++r) honest.push_back(rows.data() + r * n);
  for (int r = ranks - f; r < ranks; ++r) {
    aggregate::AttackInput input;
    input.own = rows.data() + r * n;
    input.honest = honest;
    input.workers = ranks;
    input.byzantine = f;
    input.step = static_cast<std::uint64_t>(step);
    input.rank = r;
    attack->apply(input, n, rows.data() + r * n);
  }
}

// The whole step by hand: per bucket (one aggregator each, kept across steps), rows, attack,
// aggregate.
std::vector<std::vector<float>> by_hand(const RobustOptions& options, int ranks, int steps) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  std::vector<std::unique_ptr<aggregate::Aggregator>> aggregators;
  for (std::size_t b = 0; b < buckets.size(); ++b) {
    aggregators.push_back(
        aggregate::parse_aggregator(options.aggregator, options.byzantine, options.seed));
  }
  // Worker momentum: each rank's row is its momentum m_r = beta m_r + P g_r.
  std::vector<std::vector<float>> momenta(buckets.size());
  std::vector<std::vector<float>> out;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> result(static_cast<std::size_t>(total(buckets)));
    for (std::size_t b = 0; b < buckets.size(); ++b) {
      std::vector<float> rows = honest_rows(ranks, step, buckets[b]);
      if (options.worker_momentum > 0.0f) {
        momenta[b].resize(rows.size(), 0.0f);
        for (std::size_t i = 0; i < rows.size(); ++i) {
          momenta[b][i] = options.worker_momentum * momenta[b][i] + rows[i];
          rows[i] = momenta[b][i];
        }
      }
      if (options.attack != "none") {
        attack_by_hand(options.attack, options.byzantine, ranks, step, buckets[b].count, rows);
      }
      aggregators[b]->aggregate(rows.data(), ranks, buckets[b].count,
                                result.data() + buckets[b].offset);
    }
    out.push_back(result);
  }
  return out;
}

void expect_all_equal(const std::vector<RankRun>& runs,
                      const std::vector<std::vector<float>>& expected, const std::string& what) {
  for (std::size_t r = 0; r < runs.size(); ++r) {
    ASSERT_EQ(runs[r].results.size(), expected.size());
    for (std::size_t step = 0; step < expected.size(); ++step) {
      const auto& got = runs[r].results[step];
      const auto& want = expected[step];
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i]) << what << " rank " << r << " step " << step << " element " << i;
      }
    }
  }
}

TEST(RobustReducer, MeanEqualsThePlainAllreduce) {
  for (int ranks = 1; ranks <= 6; ++ranks) {
    for (const bool async : {false, true}) {
      const auto robust = run_reducer(robust_reducer({"mean", "none", 0, kSeed}), ranks, 2, async);
      const auto plain = run_reducer(allreduce_reducer(), ranks, 2, async);
      for (int r = 0; r < ranks; ++r) {
        for (int step = 0; step < 2; ++step) {
          const auto& got = robust[static_cast<std::size_t>(r)].results[step];
          const auto& want = plain[static_cast<std::size_t>(r)].results[step];
          for (std::size_t i = 0; i < want.size(); ++i) {
            // The sum of P values in [-1, 1): the ring adds P - 1 times in f32, partial sums up
            // to P (P x 2^-24 each); the mean rounds P x g once and sums in double.
            ASSERT_NEAR(got[i], want[i], 2e-7 * ranks * ranks)
                << "P=" << ranks << " rank " << r << " step " << step << " element " << i;
          }
        }
      }
    }
  }
}

class RobustReducerSweep
    : public ::testing::TestWithParam<std::tuple<const char*, const char*, int, bool>> {};

// (aggregator, attack, f) by P: every rank's buffer equals the aggregator applied by hand.
TEST_P(RobustReducerSweep, EqualsTheAggregatorAppliedByHand) {
  const auto [aggregator, attack, f, async] = GetParam();
  for (int ranks = 1; ranks <= 6; ++ranks) {
    const RobustOptions options{aggregator, attack, f, kSeed};
    if (f >= ranks) continue;
    if (std::string(attack) == "alie" && f > ranks / 2) continue;  // z's formula: f <= P/2
    const auto probe = aggregate::parse_aggregator(aggregator, f, kSeed);
    try {
      probe->check_inputs(ranks);
    } catch (const ConfigError&) {
      continue;  // Krum with too few ranks: the test below checks that error
    }
    const auto runs = run_reducer(robust_reducer(options), ranks, 2, async);
    expect_all_equal(runs, by_hand(options, ranks, 2),
                     fmt::format("{} {} f={} P={}", aggregator, attack, f, ranks));
  }
}

INSTANTIATE_TEST_SUITE_P(Aggregators, RobustReducerSweep,
                         ::testing::Combine(::testing::Values("median", "trimmed:0.2", "krum",
                                                              "multikrum", "cclip:0.5",
                                                              "cclip:auto", "bucket:2,median"),
                                            ::testing::Values("none"), ::testing::Values(0, 1),
                                            ::testing::Bool()));

INSTANTIATE_TEST_SUITE_P(Attacks, RobustReducerSweep,
                         ::testing::Combine(::testing::Values("mean", "median", "krum"),
                                            ::testing::Values("signflip", "scale:-10", "alie",
                                                              "ipm", "noise:0.5"),
                                            ::testing::Values(1, 2), ::testing::Values(false)));

// Worker momentum (Karimireddy et al. 2021): each rank sends m_r = beta m_r + P g_r and the
// aggregator combines the momenta, bit for bit as by hand, attacked or not; its state goes out and
// comes back whole.
TEST(RobustReducer, WorkerMomentumAggregatesEachRanksMomentum) {
  for (const auto& [aggregator, attack] : std::vector<std::pair<std::string, std::string>>{
           {"median", "none"}, {"cclip", "alie"}, {"mean", "signflip"}, {"trimmed:0.25", "none"}}) {
    SCOPED_TRACE(aggregator + " " + attack);
    RobustOptions options{aggregator, attack, attack == "none" ? 0 : 1, kSeed, 0.9f};
    for (bool async : {false, true}) {
      expect_all_equal(run_reducer(robust_reducer(options), 4, 4, async), by_hand(options, 4, 4),
                       aggregator);
    }
  }
  comm::spawn_ranks(2, [&](comm::Communicator& comm) {
    const std::vector<GradientBucket> buckets = odd_buckets();
    auto model = small_mlp();
    RobustReducer reducer(ReducerContext{comm, *model, buckets, {}},
                          RobustOptions{"median", "none", 0, kSeed, 0.5f});
    std::vector<float> grads = gradient(comm.rank(), 0, total(buckets));
    for (const GradientBucket& b : buckets) reducer.reduce(b, grads.data() + b.offset);
    const std::vector<float> saved = reducer.momentum();
    EXPECT_EQ(saved.size(), static_cast<std::size_t>(total(buckets)));
    RobustReducer restored(ReducerContext{comm, *model, buckets, {}},
                           RobustOptions{"median", "none", 0, kSeed, 0.5f});
    restored.load_momentum(saved);
    EXPECT_EQ(restored.momentum(), saved);
    EXPECT_THROW(restored.load_momentum(std::vector<float>(3)), InternalError);
  });
}

TEST(RobustReducer, AnAttackReplacesExactlyTheLastFRanksRows) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  for (const char* attack : {"signflip", "scale:-10", "alie"}) {
    for (int ranks = 2; ranks <= 6; ++ranks) {
      for (int f = 1; f < ranks && f <= ranks / 2; ++f) {
        const auto runs = run_reducer(robust_reducer({"median", attack, f, kSeed}), ranks, 1,
                                      /*async=*/false);
        for (std::size_t b = 0; b < buckets.size(); ++b) {
          const std::vector<float> honest = honest_rows(ranks, 0, buckets[b]);
          std::vector<float> attacked = honest;
          attack_by_hand(attack, f, ranks, 0, buckets[b].count, attacked);
          for (const RankRun& run : runs) {
            const std::vector<float>& rows = run.gathered[b];
            ASSERT_EQ(rows.size(), honest.size());
            for (std::size_t i = 0; i < rows.size(); ++i) {
              const int r = static_cast<int>(i / static_cast<std::size_t>(buckets[b].count));
              ASSERT_EQ(rows[i], r < ranks - f ? honest[i] : attacked[i])
                  << attack << " P=" << ranks << " f=" << f << " bucket " << b << " row " << r;
            }
          }
        }
        // signflip by its formula: the last row is minus the honest one.
        if (std::string(attack) == "signflip") {
          const std::vector<float>& rows = runs.front().gathered.back();
          const std::vector<float> honest = honest_rows(ranks, 0, buckets.back());
          const std::size_t last = static_cast<std::size_t>(ranks - 1) * 1000;
          EXPECT_EQ(rows[last + 3], -honest[last + 3]);
        }
      }
    }
  }
}

TEST(RobustReducer, SendsPMinusOneRowsPerRank) {
  const std::int64_t n = total(odd_buckets());
  for (int ranks = 1; ranks <= 6; ++ranks) {
    const auto runs = run_reducer(robust_reducer({"median", "none", 0, kSeed}), ranks, 2, false);
    for (const RankRun& run : runs) {
      EXPECT_EQ(run.allgather.bytes_sent, 2 * (ranks - 1) * 4 * n) << "P=" << ranks;
      EXPECT_EQ(run.allgather.calls, 2 * 3);
    }
  }
}

TEST(RobustReducer, ImpossibleSettingsAreConfigErrorsWithTheNumbers) {
  const auto message = [](const RobustOptions& options, int ranks) {
    std::string text;
    try {
      run_reducer(robust_reducer(options), ranks, 1, false);
    } catch (const ConfigError& e) {
      text = e.what();
    }
    return text;
  };
  EXPECT_NE(message({"krum", "none", 1, kSeed}, 4).find("n > 2f + 2 = 4"), std::string::npos)
      << message({"krum", "none", 1, kSeed}, 4);
  EXPECT_NE(message({"median", "signflip", 3, kSeed}, 3).find("f < P = 3"), std::string::npos)
      << message({"median", "signflip", 3, kSeed}, 3);
  EXPECT_NE(message({"median", "signflip", 0, kSeed}, 3).find("byzantine >= 1"), std::string::npos);
}

TEST(RobustReducer, NeedsTheRobustPathForAnAggregatorOrAGradientAttack) {
  EXPECT_FALSE(needs_robust_reducer("mean", "none"));
  EXPECT_FALSE(needs_robust_reducer("mean", "labelflip"));
  EXPECT_TRUE(needs_robust_reducer("mean", "alie"));
  EXPECT_TRUE(needs_robust_reducer("median", "none"));
}

}  // namespace
}  // namespace dtrain::parallel
