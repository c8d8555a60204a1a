// dtrain sweep's engine: axes parse, the grid runs in order, speedups are against the one-worker
// run at the same point, bad values fail before any run, and the table/CSV/JSON carry every row.
#include "dtrain/experiments/sweep.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"

namespace dtrain::experiments {
namespace {

using namespace dtrain::train;  // NOLINT(google-build-using-namespace)

namespace fs = std::filesystem;
using ::testing::HasSubstr;

Config tiny() {
  Config c;
  c.data.dataset = "synthetic";
  c.data.synthetic_samples = 96;
  c.data.synthetic_test_samples = 32;
  c.data.synthetic_classes = 3;
  c.data.synthetic_shape = {1, 3, 3};
  c.model.hidden = {8};
  c.train.epochs = 1;
  c.train.batch_size = 12;
  c.train.checkpoint_every = 0;
  c.parallel.trace_steps = 0;
  return c;
}

TEST(SweepAxis, ParsesAndRejects) {
  const SweepAxis axis = parse_sweep_axis("parallel.workers=1,2,4");
  EXPECT_EQ(axis.key, "parallel.workers");
  EXPECT_EQ(axis.values, (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_THROW(parse_sweep_axis("parallel.workers"), ConfigError);
  EXPECT_THROW(parse_sweep_axis("=1,2"), ConfigError);
  EXPECT_THROW(parse_sweep_axis("parallel.workers=1,,2"), ConfigError);
}

class SweepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = fs::temp_directory_path() / fmt::format("dtrain_sweep_{}_{}", info->name(), ::getpid());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(SweepTest, RunsTheGridAndComparesWithOneWorker) {
  const std::vector<SweepAxis> axes{parse_sweep_axis("parallel.workers=1,2"),
                                    parse_sweep_axis("parallel.allreduce=ring,tree")};
  std::vector<std::size_t> seen;
  const SweepResult result = run_sweep(tiny(), axes, root_.string(),
                                       [&](const SweepRow&, std::size_t index, std::size_t total) {
                                         EXPECT_EQ(total, 4u);
                                         seen.push_back(index);
                                       });
  EXPECT_EQ(seen, (std::vector<std::size_t>{0, 1, 2, 3}));
  ASSERT_EQ(result.rows.size(), 4u);
  EXPECT_EQ(result.rows[0].point, (std::vector<std::string>{"1", "ring"}));
  EXPECT_EQ(result.rows[3].point, (std::vector<std::string>{"2", "tree"}));
  EXPECT_DOUBLE_EQ(result.rows[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(result.rows[1].speedup, 1.0);  // its own one-worker point (tree)
  EXPECT_EQ(result.rows[2].ranks, 2);
  EXPECT_DOUBLE_EQ(result.rows[2].speedup,
                   result.rows[2].samples_per_second / result.rows[0].samples_per_second);
  EXPECT_DOUBLE_EQ(result.rows[2].efficiency, result.rows[2].speedup / 2.0);
  EXPECT_EQ(result.rows[0].bytes_per_step, 0.0);
  EXPECT_GT(result.rows[2].bytes_per_step, 0.0);
  for (const auto& row : result.rows)
    EXPECT_TRUE(fs::exists(fs::path(row.run_dir) / "summary.json"));
  const std::string csv = sweep_csv(result);
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5);
  EXPECT_THAT(csv, HasSubstr("parallel.workers,parallel.allreduce,ranks,"));
  EXPECT_EQ(sweep_json(result).size(), 4u);
  EXPECT_EQ(sweep_json(result)[3]["point"]["parallel.allreduce"], "tree");
  EXPECT_THAT(sweep_table(result), HasSubstr("speedup"));
}

TEST_F(SweepTest, BadValueFailsBeforeAnyRun) {
  const std::vector<SweepAxis> axes{parse_sweep_axis("parallel.allreduce=ring,bogus")};
  try {
    run_sweep(tiny(), axes, root_.string());
    FAIL() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("bogus"));
  }
  EXPECT_FALSE(fs::exists(root_ / "parallel.allreduce=ring"));
}

}  // namespace
}  // namespace dtrain::experiments

namespace dtrain::experiments {
namespace {

using namespace dtrain::train;  // NOLINT(google-build-using-namespace)

TEST(SweepModes, ExpandToTheirKeysAndRejectUnknownOnes) {
  EXPECT_EQ(mode_overrides("allreduce"),
            (std::vector<std::string>{"parallel.strategy=\"data_parallel\""}));
  EXPECT_EQ(mode_overrides("data_parallel"), mode_overrides("allreduce"));
  EXPECT_THAT(mode_overrides("backup=2"), ::testing::Contains("parameter_server.backup_workers=2"));
  EXPECT_THAT(mode_overrides("ssp=3"), ::testing::Contains("parameter_server.staleness=3"));
  EXPECT_THAT(mode_overrides("async/4"), ::testing::Contains("parameter_server.pull_every=4"));
  EXPECT_THAT(mode_overrides("async"),
              ::testing::Contains("parameter_server.consistency=\"async\""));
  EXPECT_THROW(mode_overrides("backup="), ConfigError);
  EXPECT_THROW(mode_overrides("ssp=x"), ConfigError);
  EXPECT_THROW(mode_overrides("hogwash"), ConfigError);
  EXPECT_EQ(mode_overrides("local_sgd=4"),
            (std::vector<std::string>{"parallel.strategy=\"local_sgd\"", "local_sgd.period=4"}));
  EXPECT_THROW(mode_overrides("local_sgd="), ConfigError);
}

// A point whose run fails stops the sweep; the finished points are kept and the failure is named.
TEST_F(SweepTest, AFailingPointKeepsTheFinishedOnes) {
  Config base = tiny();
  base.data.path = (root_ / "no-cifar-here").string();
  const SweepResult result =
      run_sweep(base, {parse_sweep_axis("data.dataset=synthetic,cifar10")}, root_.string());
  ASSERT_EQ(result.rows.size(), 1u);
  EXPECT_EQ(result.rows[0].point[0], "synthetic");
  EXPECT_THAT(result.failed_point, HasSubstr("cifar10"));
  ASSERT_TRUE(result.failure);
  EXPECT_THROW(std::rethrow_exception(result.failure), DataError);
  EXPECT_THAT(sweep_csv(result), HasSubstr("synthetic"));
}

// Colocated servers run on the workers' ranks: the sweep counts the ranks the launcher starts.
TEST_F(SweepTest, ColocatedServersAreNotCountedAsRanks) {
  Config base = tiny();
  base.parallel.workers = 2;
  base.parameter_server.colocate_servers = true;
  const SweepResult result = run_sweep(base, {parse_sweep_axis("mode=sync")}, root_.string());
  ASSERT_EQ(result.rows.size(), 1u);
  EXPECT_EQ(result.rows[0].ranks, 2);
}

TEST_F(SweepTest, ComparesTheWaysOfTrainingUnderOneStraggler) {
  Config base = tiny();
  base.parallel.workers = 3;
  base.parallel.straggler = "rank=2,slowdown=2";
  const std::vector<SweepAxis> axes{parse_sweep_axis("mode=allreduce,sync,backup=1,async,ssp=1")};
  const SweepResult result = run_sweep(base, axes, root_.string());
  ASSERT_EQ(result.rows.size(), 5u);
  EXPECT_EQ(result.rows[0].ranks, 3);
  EXPECT_EQ(result.rows[1].ranks, 4);  // 3 workers + 1 server
  for (std::size_t k = 0; k < result.rows.size(); ++k) {
    const SweepRow& row = result.rows[k];
    // async and ssp hand batches out as tickets: on a busy machine the other workers may take
    // all 24 of them before worker 0, whose steps the figures are, asks for one.
    if (k < 3) {
      EXPECT_GT(row.step_median, 0.0) << row.point[0];
    }
    EXPECT_GE(row.step_p99, row.step_median);
    EXPECT_GT(row.bytes_per_step, 0.0);
  }
  const auto summary =
      nlohmann::json::parse(std::ifstream(fs::path(result.rows[3].run_dir) / "summary.json"));
  EXPECT_EQ(summary["parallel"]["consistency"], "async");
  EXPECT_THAT(sweep_table(result), HasSubstr("p99 ms"));
}

}  // namespace
}  // namespace dtrain::experiments
