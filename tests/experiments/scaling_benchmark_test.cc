// dtrain bench scaling's engine: one row per worker count in the order given, the first count's
// speedup exactly 1 in every round, the speedups' range bracketing their median, phases of the
// asked size for both strategies, and bad options refused before anything runs.
#include "dtrain/experiments/scaling_benchmark.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"
#include "parallel_training_fixture.h"

namespace dtrain::experiments {
namespace {

using namespace dtrain::train;  // NOLINT(google-build-using-namespace)

using ::testing::HasSubstr;
// 240 samples, global batch 24 (the data-parallel tests' MLP).
class ScalingBenchmark : public testing::ParallelTrainingTest {};

Config tiny_hogwild() {
  Config c;
  c.parallel.strategy = "hogwild";
  c.model.name = "logistic";
  c.data.dataset = "sparse-synthetic";
  c.data.synthetic_samples = 2000;
  c.data.synthetic_test_samples = 100;
  c.data.sparse_features = 500;
  c.data.sparse_nonzeros = 5;
  c.optim.momentum = 0.0;
  c.optim.lr = 0.1;
  return c;
}

void expect_consistent(const std::vector<ScalingBenchmarkRow>& rows,
                       const std::vector<int>& workers, std::int64_t samples_per_phase) {
  ASSERT_EQ(rows.size(), workers.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "row " << i);
    EXPECT_EQ(rows[i].workers, workers[i]);
    EXPECT_EQ(rows[i].samples_per_phase, samples_per_phase);
    EXPECT_GT(rows[i].rate_min, 0.0);
    EXPECT_LE(rows[i].rate_min, rows[i].rate);
    EXPECT_LE(rows[i].rate, rows[i].rate_max);
    EXPECT_LE(rows[i].speedup_min, rows[i].speedup);
    EXPECT_LE(rows[i].speedup, rows[i].speedup_max);
    EXPECT_DOUBLE_EQ(rows[i].efficiency, rows[i].speedup * workers[0] / workers[i]);
  }
  // The baseline against itself, round by round.
  EXPECT_DOUBLE_EQ(rows[0].speedup_min, 1.0);
  EXPECT_DOUBLE_EQ(rows[0].speedup_max, 1.0);
}

TEST_F(ScalingBenchmark, DataParallelRowsFollowTheWorkerList) {
  ScalingBenchmarkOptions options;
  options.workers = {2, 1, 3};  // the baseline need not be 1; a sub-communicator for 2 of 3
  options.rounds = 3;
  options.steps = 4;
  options.warmup_steps = 1;
  const auto rows = run_scaling_benchmark(mlp_config(), options);
  expect_consistent(rows, options.workers, 4 * 24);
  EXPECT_EQ(rows[0].strategy, "data_parallel");
}

TEST_F(ScalingBenchmark, HogwildPhasesAreEpochs) {
  ScalingBenchmarkOptions options;
  options.rounds = 3;
  int rounds_seen = 0;
  const auto rows = run_scaling_benchmark(tiny_hogwild(), options,
                                          [&](int round) { EXPECT_EQ(round, rounds_seen++); });
  EXPECT_EQ(rounds_seen, 3);
  expect_consistent(rows, options.workers, 2000);
  EXPECT_EQ(rows[1].strategy, "hogwild");
}

TEST_F(ScalingBenchmark, RefusesWhatItCannotMeasure) {
  ScalingBenchmarkOptions options;
  Config ps = mlp_config();
  ps.parallel.strategy = "parameter_server";
  try {
    check_scaling_benchmark(ps, options);
    FAIL() << "ps accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("sweep --modes"));
  }
  options.workers = {1, 1};
  EXPECT_THROW(check_scaling_benchmark(mlp_config(), options), ConfigError);
  options.workers = {0, 2};
  EXPECT_THROW(check_scaling_benchmark(mlp_config(), options), ConfigError);
  options.workers = {};
  EXPECT_THROW(check_scaling_benchmark(mlp_config(), options), ConfigError);
  options.workers = {1, 2};
  options.rounds = 0;
  EXPECT_THROW(run_scaling_benchmark(mlp_config(), options), ConfigError);
  options.rounds = 1;
  options.steps = 0;
  EXPECT_THROW(check_scaling_benchmark(mlp_config(), options), ConfigError);
  options.steps = 1;
  options.warmup_steps = -1;
  EXPECT_THROW(check_scaling_benchmark(mlp_config(), options), ConfigError);
}

}  // namespace
}  // namespace dtrain::experiments
