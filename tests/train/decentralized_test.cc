// Decentralized SGD (parallel.strategy = "decentralized"): with topology "full" it follows
// synchronous data parallelism, every topology trains for P = 2..8, the gossip's bytes match
// out-degree x 4N from the counters, the consensus distance is 0 for "full", positive for a ring
// and smaller with global averages, evaluation leaves the training alone, a resumed run continues
// bitwise, and a topology that does not exist for the rank count is a one-line ConfigError before
// training.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/topology.h"
#include "dtrain/train/config.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/strategies/decentralized/decentralized_sgd.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class DecentralizedTest : public testing::ParallelTrainingTest {
 protected:
  static Config decentralized_config(const std::string& topology) {
    Config c = mlp_config();
    c.train.epochs = 2;
    c.parallel.strategy = "decentralized";
    c.decentralized.topology = topology;
    return c;
  }

  static nlohmann::json summary_of(const std::string& run_dir) {
    std::ifstream in(fs::path(run_dir) / "summary.json");
    return nlohmann::json::parse(in);
  }

  static std::vector<nlohmann::json> records_of(const std::string& run_dir,
                                                const std::string& kind) {
    std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
    std::vector<nlohmann::json> records;
    for (std::string line; std::getline(in, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record.value("kind", "") == kind) records.push_back(record);
    }
    return records;
  }

  static float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
    }
    return worst;
  }

  // As the launcher runs it (run_decentralized_rank: the strategy gets the test set, so the
  // summary lists each replica's accuracy): `ranks` threads train `config` in `run_dir`; returns
  // rank 0's parameters at the end (the replicas' average, checked equal on every rank).
  std::vector<float> decentralized_training(Config config, int ranks, const std::string& run_dir,
                                            bool resume = false) {
    config.parallel.workers = ranks;
    const auto data = std::make_shared<const RunData>(load_run_data(config.data));
    std::vector<std::vector<float>> params(static_cast<std::size_t>(ranks));
    comm::spawn_ranks(
        ranks,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions options{run_dir, resume, true, stderr, nullptr, data};
          options.comm = &comm;
          options.make_strategy = [&](const StrategyContext& context) {
            return std::unique_ptr<Strategy>(
                std::make_unique<DecentralizedSgd>(context, &data->test));
          };
          Trainer trainer(config, options);
          trainer.run();
          const auto& store = trainer.model().store();
          params[static_cast<std::size_t>(comm.rank())].assign(store.params(),
                                                               store.params() + store.num_params());
        },
        comm_options());
    for (int r = 1; r < ranks; ++r) {
      EXPECT_EQ(params[static_cast<std::size_t>(r)], params[0]) << "rank " << r;
    }
    return params[0];
  }
};

// Local step, then gossip with W = 11^T / P: every replica holds the average after every step,
// and with SGD + momentum (linear in the gradient) the average is the synchronous update.
TEST_F(DecentralizedTest, FullTopologyFollowsSynchronousDataParallelism) {
  for (const int ranks : {2, 3, 4}) {
    Config sync = mlp_config();
    sync.train.epochs = 2;
    sync.optim.nesterov = true;
    sync.optim.weight_decay = 1e-3;
    Config full = decentralized_config("full");
    full.optim = sync.optim;
    const std::string run_dir = dir(fmt::format("full{}", ranks));
    const std::vector<float> expected = allreduce_training(sync, ranks);
    const std::vector<float> actual = allreduce_training(full, ranks, run_dir);
    EXPECT_LT(max_abs_difference(actual, expected), 1e-5f) << ranks << " ranks";
    // The replicas agree at every evaluation and at the end (rounding of the mean aside).
    const nlohmann::json parallel = summary_of(run_dir)["parallel"];
    ASSERT_EQ(parallel["consensus_distance"].size(), 2u);
    for (const auto& point : parallel["consensus_distance"]) {
      EXPECT_LT(point["distance"].get<double>(), 1e-12) << ranks << " ranks";
    }
    EXPECT_LT(parallel["final_consensus_distance"].get<double>(), 1e-12);
  }
}

TEST_F(DecentralizedTest, EveryTopologyTrainsOnTwoToEightRanks) {
  for (const comm::TopologyKind kind : comm::topology_kinds()) {
    const std::string topology(comm::topology_name(kind));
    for (int ranks = 2; ranks <= 8; ++ranks) {
      if (kind == comm::TopologyKind::kTorus && ranks != 4 && ranks != 6 && ranks != 8) continue;
      for (const bool overlap : {false, true}) {
        if (overlap && ranks != 5 && ranks != 8) continue;  // Lian's order on two counts
        Config config = decentralized_config(topology);
        config.decentralized.overlap = overlap;
        const std::string run_dir = dir(fmt::format("{}{}", topology, ranks));
        decentralized_training(config, ranks, run_dir);
        const std::string what =
            fmt::format("{} on {} ranks, overlap {}", topology, ranks, overlap);
        const auto steps = records_of(run_dir, "step");
        const auto epochs = records_of(run_dir, "epoch");
        ASSERT_FALSE(steps.empty()) << what;
        ASSERT_EQ(epochs.size(), 2u) << what;
        // The first 5 steps' mean loss against the second epoch's.
        EXPECT_LT(epochs[1]["train_loss"].get<double>(), 0.8 * steps[0]["loss"].get<double>())
            << what;
        const nlohmann::json summary = summary_of(run_dir);
        EXPECT_GT(summary["final_test_accuracy"].get<double>(), 0.5) << what;
        const nlohmann::json& replicas = summary["parallel"]["replica_test_accuracy"];
        ASSERT_EQ(std::ssize(replicas), ranks) << what;
        for (const auto& accuracy : replicas) EXPECT_GT(accuracy.get<double>(), 0.4) << what;
      }
    }
  }
}

// The neighbour allreduce counter against out-degree x 4N per step (the MLP has no buffers), and
// one-peer exponential against ring allreduce: exactly 1 / (2 (P-1)/P).
TEST_F(DecentralizedTest, GossipBytesPerStepMatchTheFormula) {
  const std::int64_t n = 16 * 16 + 16 + 16 * 8 + 8 + 8 * 4 + 4;
  struct Case {
    const char* topology;
    int ranks;
    int out_degree;
  };
  for (const Case& c :
       {Case{"ring", 2, 1}, Case{"ring", 5, 2}, Case{"torus", 8, 3}, Case{"torus", 9, 4},
        Case{"exponential", 8, 5}, Case{"exponential", 6, 4}, Case{"one-peer-exponential", 8, 1},
        Case{"one-peer-exponential", 6, 1}, Case{"full", 4, 3}}) {
    for (const bool overlap : {false, true}) {
      Config config = decentralized_config(c.topology);
      config.decentralized.overlap = overlap;
      const std::string run_dir = dir(c.topology);
      allreduce_training(config, c.ranks, run_dir);
      const nlohmann::json parallel = summary_of(run_dir)["parallel"];
      const std::string what = fmt::format("{} on {}, overlap {}", c.topology, c.ranks, overlap);
      EXPECT_EQ(parallel["gossip_steps"].get<std::int64_t>(), 20) << what;
      const double measured = parallel["gossip_bytes_sent_per_rank_and_step"].get<double>();
      EXPECT_DOUBLE_EQ(parallel["gossip_bytes_sent_per_rank_and_step_predicted"].get<double>(),
                       c.out_degree * 4.0 * static_cast<double>(n))
          << what;
      EXPECT_DOUBLE_EQ(measured, c.out_degree * 4.0 * static_cast<double>(n)) << what;
      EXPECT_DOUBLE_EQ(parallel["ring_allreduce_bytes_per_rank_and_step"].get<double>(),
                       DecentralizedSgd::ring_allreduce_bytes(n, c.ranks))
          << what;
      if (std::string(c.topology) == "one-peer-exponential") {
        const double p = c.ranks;
        EXPECT_NEAR(parallel["gossip_to_ring_allreduce"].get<double>(), 1.0 / (2.0 * (p - 1) / p),
                    1e-12)
            << what;
      }
    }
  }
}

// Global averages replace the gossip on their steps and cost a ring allreduce each.
TEST_F(DecentralizedTest, GlobalAveragesReplaceTheGossipAndMatchTheirFormula) {
  Config config = decentralized_config("ring");
  config.decentralized.global_average_every = 4;
  config.parallel.check_headers = false;  // the header round trips are not the formula's
  const std::string run_dir = dir("global");
  allreduce_training(config, 4, run_dir);
  const nlohmann::json parallel = summary_of(run_dir)["parallel"];
  EXPECT_EQ(parallel["global_averages"].get<std::int64_t>(), 5);  // steps 4, 8, ..., 20
  EXPECT_EQ(parallel["gossip_steps"].get<std::int64_t>(), 15);
  EXPECT_NEAR(parallel["global_average_bytes_sent_per_rank_and_step"].get<double>() /
                  parallel["global_average_bytes_sent_per_rank_and_step_predicted"].get<double>(),
              1.0, 1e-3);
}

TEST_F(DecentralizedTest, ConsensusDistanceIsPositiveOnARingAndShrinksWithGlobalAverages) {
  auto consensus = [&](std::int64_t every) {
    Config config = decentralized_config("ring");
    config.decentralized.global_average_every = every;
    config.train.eval_every_steps = 4;  // 2 mid-epoch evaluations per epoch, then its end
    const std::string run_dir = dir(fmt::format("every{}", every));
    allreduce_training(config, 5, run_dir);
    const nlohmann::json parallel = summary_of(run_dir)["parallel"];
    EXPECT_EQ(parallel["consensus_distance"].size(), 6u);
    double sum = 0.0;
    for (const auto& point : parallel["consensus_distance"]) {
      sum += point["distance"].get<double>();
    }
    return sum / 6.0;
  };
  const double never = consensus(0);
  const double every3 = consensus(3);
  EXPECT_GT(never, 1e-8);
  EXPECT_GT(every3, 0.0);
  EXPECT_LT(every3, 0.7 * never);
}

// Evaluation puts the replicas' average into the store and gives each rank its replica back: the
// training is the same as without it, bit for bit.
TEST_F(DecentralizedTest, MidEpochEvaluationDoesNotChangeTheTraining) {
  const Config plain = decentralized_config("ring");
  Config evaluated = plain;
  evaluated.train.eval_every_steps = 3;
  EXPECT_EQ(allreduce_training(evaluated, 3), allreduce_training(plain, 3));
}

TEST_F(DecentralizedTest, LiansOrderTrainsAnotherTrajectory) {
  Config overlapped = decentralized_config("ring");
  overlapped.decentralized.overlap = true;
  const std::vector<float> a = allreduce_training(decentralized_config("ring"), 4);
  const std::vector<float> b = allreduce_training(overlapped, 4);
  EXPECT_GT(relative_difference(a, b), 1e-6);
  EXPECT_LT(relative_difference(a, b), 0.5);
}

// Each rank's parameters and momentum are its own; the checkpoint keeps every rank's, so a
// resumed run continues exactly as the uninterrupted one.
TEST_F(DecentralizedTest, ResumeContinuesBitwise) {
  for (const bool overlap : {false, true}) {
    Config config = decentralized_config(overlap ? "one-peer-exponential" : "ring");
    config.decentralized.overlap = overlap;
    config.decentralized.global_average_every = overlap ? 7 : 0;
    config.train.checkpoint_every = 1;
    const std::string whole = dir("whole");
    const std::vector<float> uninterrupted = decentralized_training(config, 3, whole);
    const std::string part = dir("part");
    Config first = config;
    first.train.epochs = 1;
    decentralized_training(first, 3, part);
    const std::vector<float> resumed = decentralized_training(config, 3, part, /*resume=*/true);
    EXPECT_EQ(resumed, uninterrupted) << "overlap " << overlap;
    const nlohmann::json a = summary_of(whole);
    const nlohmann::json b = summary_of(part);
    EXPECT_EQ(a["final_train_loss"], b["final_train_loss"]);
    EXPECT_EQ(a["parallel"]["final_consensus_distance"], b["parallel"]["final_consensus_distance"]);
    EXPECT_EQ(a["parallel"]["replica_test_accuracy"], b["parallel"]["replica_test_accuracy"]);
  }
}

TEST_F(DecentralizedTest, ResumeOnAnotherNumberOfRanksIsRefused) {
  Config config = decentralized_config("ring");
  config.train.epochs = 1;
  const std::string run_dir = dir("two");
  allreduce_training(config, 2, run_dir);
  config.train.epochs = 2;
  EXPECT_THAT([&] { allreduce_training(config, 3, run_dir, /*resume=*/true); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the replicas of 2 ranks")));
}

// Through the launcher, as `dtrain train --workers 7` runs it: refused before any Trainer exists,
// so nothing is written.
TEST_F(DecentralizedTest, ATopologyThatDoesNotExistIsAOneLineErrorBeforeTraining) {
  Config config = decentralized_config("torus");
  config.parallel.workers = 7;
  const std::string run_dir = dir("torus7");
  TrainerOptions options{run_dir, false, true, stderr, nullptr, nullptr};
  try {
    run_training(config, options);
    FAIL() << "torus on 7 ranks trained";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr("decentralized.topology"));
    EXPECT_THAT(message, HasSubstr("'torus' on 7 ranks"));
    EXPECT_THAT(message, HasSubstr("6 and 8"));
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(fs::path(run_dir) / "metrics.jsonl"));
  // The same run on 8 ranks (2 x 4) exists.
  EXPECT_NO_THROW(DecentralizedSgd::topology_for(config, 8));
}

// Through the launcher: the registry's run_rank hands the strategy the test set.
TEST_F(DecentralizedTest, TheLauncherReportsEveryReplicasAccuracy) {
  Config config = decentralized_config("one-peer-exponential");
  config.parallel.workers = 4;
  const std::string run_dir = dir("launcher");
  TrainerOptions options{run_dir, false, true, stderr, nullptr, nullptr};
  const RunSummary summary = run_training(config, options);
  const nlohmann::json parallel = summary_of(run_dir)["parallel"];
  EXPECT_EQ(parallel["strategy"], "decentralized");
  EXPECT_EQ(parallel["topology"], "one-peer-exponential");
  ASSERT_EQ(parallel["replica_test_accuracy"].size(), 4u);
  for (const auto& accuracy : parallel["replica_test_accuracy"]) {
    EXPECT_NEAR(accuracy.get<double>(), summary.final_test_accuracy, 0.1);
  }
}

TEST_F(DecentralizedTest, ConfigKeysAreCheckedAndNamed) {
  EXPECT_THAT([] { parse_config("[decentralized]\ntopology = \"star\"\n", "test.toml"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("decentralized.topology")));
  EXPECT_THAT(
      [] { parse_config("[decentralized]\nglobal_average_every = -1\n", "test.toml"); },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("decentralized.global_average_every")));
  EXPECT_THAT(
      [] {
        parse_config(
            "[parallel]\nstrategy = \"decentralized\"\n[data_parallel]\nsync_batch_norm = true\n",
            "test.toml");
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("data_parallel.sync_batch_norm")));
  Config config;
  config.decentralized.topology = "ring";
  const std::vector<std::string> ignored = ignored_settings(config);
  ASSERT_EQ(ignored.size(), 1u);
  EXPECT_THAT(ignored[0], HasSubstr("[decentralized]"));
  config.parallel.strategy = "decentralized";
  EXPECT_TRUE(ignored_settings(config).empty());
  EXPECT_EQ(parse_config(to_toml(config), "resolved.toml"), config);
}

}  // namespace
}  // namespace dtrain::train
