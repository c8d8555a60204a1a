// Parameter-server training through the Trainer (parallel.strategy = "parameter_server"): bsp
// follows the allreduce trajectory, async and ssp train, backup workers hide a straggler, and the
// summary holds the servers' staleness histograms.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/strategies/parameter_server/ps_run.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

class ParameterServerTrainingTest : public testing::ParallelTrainingTest {
 protected:
  static Config mlp_config() {
    Config c = ParallelTrainingTest::mlp_config();
    c.train.epochs = 2;
    return c;
  }

  // Every worker's parameters after `workers` workers and `servers` servers train `config`.
  // `run_dir` (default: a new folder) with `resume`: continue the run there from its checkpoint.
  std::vector<std::vector<float>> parameter_servers(Config config, int workers, int servers,
                                                    bool colocate = false, std::string run_dir = "",
                                                    bool resume = false) {
    config.parallel.strategy = "parameter_server";
    config.parallel.workers = workers;
    config.parameter_server.servers = servers;
    config.parameter_server.colocate_servers = colocate;
    if (run_dir.empty()) run_dir = dir("ps");
    const auto data = std::make_shared<const RunData>(load_run_data(config.data));
    std::vector<std::vector<float>> params(static_cast<std::size_t>(workers));
    comm::spawn_ranks(
        ps_thread_ranks(config),
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions options{run_dir, resume, true, stderr, nullptr, nullptr};
          run_ps_rank(comm, config, options, data, [&](Trainer& trainer) {
            const auto& store = trainer.model().store();
            params[static_cast<std::size_t>(comm.rank())].assign(
                store.params(), store.params() + store.num_params());
          });
        },
        comm_options());
    return params;
  }

  nlohmann::json summary_of(const std::string& run_dir) {
    std::ifstream in(fs::path(run_dir) / "summary.json");
    return nlohmann::json::parse(in);
  }
};

TEST_F(ParameterServerTrainingTest, BspFollowsTheAllreduceTrajectory) {
  for (const int workers : {2, 3}) {
    for (const int servers : {1, 2}) {
      for (const std::string optimizer : {"sgd", "adam"}) {
        Config config = mlp_config();
        config.optim.name = optimizer;
        if (optimizer == "adam") {
          config.optim.lr = 0.01;
          config.optim.momentum = 0.0;
        }
        const std::vector<float> reference = allreduce_training(config, workers);
        const auto params = parameter_servers(config, workers, servers);
        for (const auto& worker : params) {
          EXPECT_LT(relative_difference(worker, reference), 1e-5)
              << workers << " workers, " << servers << " servers, " << optimizer;
        }
      }
    }
  }
}

TEST_F(ParameterServerTrainingTest, ColocatedServersFollowTheAllreduceTrajectoryToo) {
  const Config config = mlp_config();
  const std::vector<float> reference = allreduce_training(config, 3);
  for (const auto& worker : parameter_servers(config, 3, 2, /*colocate=*/true)) {
    EXPECT_LT(relative_difference(worker, reference), 1e-5);
  }
}

TEST_F(ParameterServerTrainingTest, AsyncAndSspTrainAndReportStaleness) {
  for (const std::string consistency : {"async", "ssp"}) {
    Config config = mlp_config();
    config.train.epochs = 4;
    config.optim.momentum = 0.5;  // asynchrony adds momentum of its own (docs/PS.md)
    config.parallel.strategy = "parameter_server";
    config.parameter_server.consistency = consistency;
    config.parallel.workers = 3;
    config.parameter_server.servers = 2;
    config.parameter_server.staleness = 1;
    TrainerOptions options{dir(consistency), false, true, stderr, nullptr, nullptr};
    const RunSummary summary = run_training(config, options);
    // 4 classes: chance is 25%.
    EXPECT_GT(summary.final_test_accuracy, 0.5) << consistency;
    const nlohmann::json json = summary_of(options.run_dir);
    const auto& parallel = json["parallel"];
    EXPECT_EQ(parallel["consistency"], consistency);
    ASSERT_EQ(parallel["per_server"].size(), 2u);
    // Every ticket of every epoch was trained on once: 4 epochs x ceil(240 / 8) pushes.
    std::int64_t pushes = 0;
    for (const auto& count : parallel["per_server"][0]["pushes_per_worker"]) {
      pushes += count.get<std::int64_t>();
    }
    EXPECT_EQ(pushes, 4 * 30) << consistency;
    std::int64_t histogram_total = 0;
    for (const auto& count : parallel["staleness_histogram"]) {
      histogram_total += count.get<std::int64_t>();
    }
    EXPECT_EQ(histogram_total, 2 * pushes);  // two servers count each gradient
    if (consistency == "ssp") {
      EXPECT_LE(parallel["max_staleness"].get<int>(), 1);
    }
    EXPECT_DOUBLE_EQ(json["samples"].get<double>(), 4 * 240);
  }
}

TEST_F(ParameterServerTrainingTest, BackupWorkerKeepsTheMedianStepOfARunWithoutAStraggler) {
  // The straggler sleeps a fixed 60 ms per step: far above a step (a few ms, more under the
  // sanitizers on two shared cores), and a sleep, so it takes no cycles from the others. A
  // relative slowdown would not do: on oversubscribed cores the others' step is set by
  // contention, and a rank asleep even speeds them up.
  constexpr double kDelaySeconds = 0.060;
  Config config = mlp_config();
  config.data.synthetic_samples = 960;
  config.data.synthetic_shape = {1, 28, 28};
  config.model.hidden = {256, 256};
  config.train.batch_size = 96;
  config.train.epochs = 1;
  config.parallel.strategy = "parameter_server";
  config.parallel.workers = 3;
  auto median_step = [&](const std::string& straggler, std::int64_t backups) {
    Config c = config;
    c.parallel.straggler = straggler;
    c.parameter_server.backup_workers = backups;
    TrainerOptions options{dir("straggler"), false, true, stderr, nullptr, nullptr};
    return run_training(c, options).step_seconds_median;
  };
  const std::string straggler = "rank=2,delay_ms=60";
  const double baseline = median_step("", 0);
  const double with_backup = median_step(straggler, 1);
  const double plain = median_step(straggler, 0);
  std::printf(
      "median step: %.2f ms, with a 60 ms straggler %.2f ms, with it and a backup %.2f ms\n",
      1e3 * baseline, 1e3 * plain, 1e3 * with_backup);
  // Synchronous training waits for every worker, so each step takes at least the sleep.
  EXPECT_GE(plain, kDelaySeconds);
  // With one backup the step takes the first two gradients and never waits for the sleeper.
  EXPECT_LT(with_backup, kDelaySeconds / 2) << "baseline " << baseline << " s";
}

// Checkpoints: worker 0 gathers the servers' parameters and optimizer state in the one-worker
// layout at each checkpoint, and a resume puts them back, each server taking its key range.
TEST_F(ParameterServerTrainingTest, BspResumesBitwiseAndOnAnotherServerOrWorkerCount) {
  for (const std::string optimizer : {"sgd", "adam"}) {
    Config config = mlp_config();
    config.optim.name = optimizer;
    if (optimizer == "adam") {
      config.optim.lr = 0.01;
      config.optim.momentum = 0.0;
    }
    Config first = config;
    first.train.epochs = 1;
    // Two workers: a server's sum of two gradients is the same in either arrival order, so the
    // same run resumed is bitwise the uninterrupted one.
    const auto uninterrupted = parameter_servers(config, 2, 2);
    const std::string folder = dir("ps-resume");
    parameter_servers(first, 2, 2, false, folder);
    const auto resumed = parameter_servers(config, 2, 2, false, folder, /*resume=*/true);
    for (const auto& worker : resumed) EXPECT_EQ(worker, uninterrupted[0]) << optimizer;

    // Another server count: the checkpoint does not depend on it. Against the uninterrupted run
    // with the new count (1e-6 relative; measured: equal, as the servers' arithmetic is
    // element-wise and the same for every cut of the keys).
    for (const auto& [before, after] : {std::pair{2, 1}, std::pair{1, 2}}) {
      const std::string reshard = dir("ps-reshard");
      parameter_servers(first, 2, before, false, reshard);
      const auto continued = parameter_servers(config, 2, after, false, reshard, true);
      const auto reference = parameter_servers(config, 2, after);
      const double difference = relative_difference(continued[0], reference[0]);
      std::printf("bsp %s, %d -> %d servers: relative difference %.3g\n", optimizer.c_str(), before,
                  after, difference);
      EXPECT_LT(difference, 1e-6) << optimizer << " " << before << " -> " << after;
    }

    // Another worker count (2 -> 3): the same global batches, so the same updates up to the
    // order of the servers' sums.
    const std::string regrow = dir("ps-workers");
    parameter_servers(first, 2, 1, false, regrow);
    const auto three = parameter_servers(config, 3, 1, false, regrow, true);
    const double difference = relative_difference(three[0], parameter_servers(config, 3, 1)[0]);
    std::printf("bsp %s, 2 -> 3 workers: relative difference %.3g\n", optimizer.c_str(),
                difference);
    EXPECT_LT(difference, 1e-6) << optimizer;
  }
}

// Compressed pushes (QSGD without error feedback: its seed comes from the worker's step; top-k
// with it: the checkpoint holds every worker's residual) and fp16 pulls (the checkpoint holds the
// servers' f32 copy; every worker pulls the cast one again): a bsp run resumed is bitwise the
// uninterrupted one, and not the uncompressed run. On 3 workers the residuals restart at zero.
TEST_F(ParameterServerTrainingTest, BspWithCompressedPushesAndCastPullsResumesBitwise) {
  Config plain = mlp_config();
  const auto uncompressed = parameter_servers(plain, 2, 2);
  for (const std::string codec : {"qsgd:4", "topk:0.1"}) {
    SCOPED_TRACE(codec);
    Config config = mlp_config();
    config.parameter_server.compression = codec;
    config.parameter_server.pull_compression = "fp16";
    Config first = config;
    first.train.epochs = 1;
    const auto uninterrupted = parameter_servers(config, 2, 2);
    const std::string folder = dir("ps-compressed-resume");
    parameter_servers(first, 2, 2, false, folder);
    const auto resumed = parameter_servers(config, 2, 2, false, folder, /*resume=*/true);
    for (const auto& worker : resumed) EXPECT_EQ(worker, uninterrupted[0]);
    EXPECT_NE(uncompressed[0], uninterrupted[0]);
    EXPECT_LT(relative_difference(uninterrupted[0], uncompressed[0]), 0.5);
    const std::string regrow = dir("ps-compressed-workers");
    parameter_servers(first, 2, 1, false, regrow);
    for (const auto& worker : parameter_servers(config, 3, 1, false, regrow, true)) {
      for (const float p : worker) ASSERT_TRUE(std::isfinite(p));
    }
  }
}

// Worker momentum (bsp, robust aggregation): each worker pushes its momentum of its own mean
// gradient. Aggregated by a mean (trimmed mean with beta = 0) it is SGD with momentum beta on the
// batch's mean gradient, and each worker's momentum is in the checkpoint: a resume is bitwise.
TEST_F(ParameterServerTrainingTest, WorkerMomentumUnderAMeanIsSgdMomentumAndResumesBitwise) {
  const Config reference_config = mlp_config();  // SGD, momentum 0.9
  ASSERT_EQ(reference_config.optim.momentum, 0.9);
  const std::vector<float> reference = allreduce_training(reference_config, 2);
  Config config = mlp_config();
  config.optim.momentum = 0.0;
  config.data_parallel.worker_momentum = 0.9;
  config.data_parallel.aggregator = "trimmed:0";
  validate(config);
  const auto uninterrupted = parameter_servers(config, 2, 1);
  const double difference = relative_difference(uninterrupted[0], reference);
  std::printf("worker momentum under trimmed:0 against SGD momentum: relative difference %.3g\n",
              difference);
  EXPECT_LT(difference, 1e-5);
  Config plain = config;
  plain.data_parallel.worker_momentum = 0.0;
  EXPECT_GT(relative_difference(parameter_servers(plain, 2, 1)[0], reference), 1e-3)
      << "without worker momentum the run must differ (the test could not fail otherwise)";

  Config first = config;
  first.train.epochs = 1;
  const std::string folder = dir("ps-worker-momentum");
  parameter_servers(first, 2, 1, false, folder);
  const auto resumed = parameter_servers(config, 2, 1, false, folder, /*resume=*/true);
  for (const auto& worker : resumed) EXPECT_EQ(worker, uninterrupted[0]);
}

// Each server's aggregator state (centered clipping's centre over its shard: two doubles' worth of
// floats per key, moved in chunks of a shard; bucketing's shuffle count) is in the checkpoint, so a
// robust bsp run resumed is bitwise the uninterrupted one (rows combine in worker order).
TEST_F(ParameterServerTrainingTest, ServersAggregatorStateResumesBitwise) {
  Config config = mlp_config();
  config.data_parallel.aggregator = "bucket:2,cclip:1";
  Config first = config;
  first.train.epochs = 1;
  const auto uninterrupted = parameter_servers(config, 3, 2);
  const std::string folder = dir("ps-aggregator-resume");
  parameter_servers(first, 3, 2, false, folder);
  const auto resumed = parameter_servers(config, 3, 2, false, folder, /*resume=*/true);
  for (const auto& worker : resumed) EXPECT_EQ(worker, uninterrupted[0]);
  // Another server count restarts the aggregators (said on worker 0) and trains on.
  Config more = config;
  more.train.epochs = 3;
  const auto other = parameter_servers(more, 3, 1, false, folder, /*resume=*/true);
  for (const float p : other[0]) ASSERT_TRUE(std::isfinite(p));
}

TEST_F(ParameterServerTrainingTest, AsyncAndSspResumeAndTrainOn) {
  for (const std::string consistency : {"async", "ssp"}) {
    Config config = mlp_config();
    config.train.epochs = 3;
    config.optim.momentum = 0.5;
    config.parallel.strategy = "parameter_server";
    config.parameter_server.consistency = consistency;
    config.parallel.workers = 3;
    config.parameter_server.servers = 2;
    config.parameter_server.staleness = 1;
    Config first = config;
    first.train.epochs = 1;
    const std::string folder = dir(consistency);
    run_training(first, TrainerOptions{folder, false, true, stderr, nullptr, nullptr});
    const RunSummary summary =
        run_training(config, TrainerOptions{folder, true, true, stderr, nullptr, nullptr});
    EXPECT_EQ(summary.resumed_from_epoch, 1);
    EXPECT_GT(summary.final_test_accuracy, 0.5) << consistency;
    const nlohmann::json json = summary_of(folder);
    // The resumed run trained on the tickets of epochs 2 and 3 only: 2 x ceil(240 / 8) pushes.
    std::int64_t pushes = 0;
    for (const auto& count : json["parallel"]["per_server"][0]["pushes_per_worker"]) {
      pushes += count.get<std::int64_t>();
    }
    EXPECT_EQ(pushes, 2 * 30) << consistency;
    if (consistency == "ssp") {
      EXPECT_LE(json["parallel"]["max_staleness"].get<int>(), 1);
    }
    EXPECT_TRUE(fs::exists(fs::path(folder) / "checkpoints" / "epoch-3.ckpt"));
  }
}

// Checkpoints inside an epoch of async runs (docs/PS.md, "Checkpoints"): worker 0 takes them by
// its own step count. One worker is deterministic even in async, so a resume from inside an epoch
// must be the uninterrupted run bit for bit: parameters, the servers' momentum, the top-k residual
// and the ticket position all restored.
TEST_F(ParameterServerTrainingTest, AsyncCheckpointsInsideAnEpochResumeBitwiseWithOneWorker) {
  Config config = mlp_config();
  config.optim.momentum = 0.5;
  config.parameter_server.consistency = "async";
  config.parameter_server.compression = "topk:0.1";
  const auto uninterrupted = parameter_servers(config, 1, 2);
  Config clocked = config;
  clocked.train.checkpoint_every_steps = 4;  // 10 steps of 24 per epoch: after steps 4, 8, 12, 16
  clocked.train.keep_checkpoints = 0;        // all
  const std::string folder = dir("ps-async-clocked");
  EXPECT_EQ(parameter_servers(clocked, 1, 2, false, folder)[0], uninterrupted[0]);
  const Checkpoint inside = read_checkpoint(folder + "/checkpoints/epoch-0-step-8.ckpt");
  EXPECT_EQ(inside.sampler_epoch, 0);
  EXPECT_EQ(inside.sampler_position, 8 * 24);  // the tickets handed out: worker 0's 8
  for (const std::string name : {"epoch-0-step-8.ckpt", "epoch-1-step-12.ckpt"}) {
    const std::string cut = dir("ps-async-cut");
    fs::copy(folder, cut, fs::copy_options::recursive);
    for (const auto& entry : fs::directory_iterator(fs::path(cut) / "checkpoints")) {
      if (entry.path().filename() != name) fs::remove(entry.path());
    }
    EXPECT_EQ(parameter_servers(clocked, 1, 2, false, cut, /*resume=*/true)[0], uninterrupted[0])
        << name;
  }
  Config plain = config;
  plain.parameter_server.compression = "none";
  EXPECT_NE(parameter_servers(plain, 1, 2)[0], uninterrupted[0]) << "the codec must matter";
}

// With two racing workers a checkpoint inside an epoch holds every worker's residual (sent
// through the servers), the tickets handed out as its position, and a resume restores all of it
// exactly: resumed at the epoch's last position (nothing left to train), the next checkpoint
// holds the same bits; resumed at the real position, the servers count exactly the tickets left.
TEST_F(ParameterServerTrainingTest, AsyncCheckpointsInsideAnEpochCarryEveryWorkersResidual) {
  Config config = mlp_config();
  config.optim.momentum = 0.5;
  config.parameter_server.consistency = "async";
  config.parameter_server.compression = "topk:0.1";
  // Every one of worker 0's steps: a racing worker 1 may take most of epoch 1's tickets (a loaded
  // machine), and one step of worker 0 in it is enough for a checkpoint there.
  config.train.checkpoint_every_steps = 1;
  config.train.keep_checkpoints = 0;  // all
  const std::string folder = dir("ps-async-residuals");
  parameter_servers(config, 2, 1, false, folder);
  std::string name;
  for (const auto& entry : fs::directory_iterator(fs::path(folder) / "checkpoints")) {
    const std::string file = entry.path().filename().string();
    if (file.rfind("epoch-0-step-", 0) == 0) name = file;
  }
  ASSERT_FALSE(name.empty()) << "no checkpoint inside epoch 1";
  const Checkpoint saved = read_checkpoint(folder + "/checkpoints/" + name);
  const std::int64_t local = 12;  // 24 / 2 workers: 20 tickets per epoch
  EXPECT_GT(saved.sampler_position, 0);
  EXPECT_LE(saved.sampler_position, 240);
  EXPECT_EQ(saved.sampler_position % local, 0);
  // A tensor of the checkpoint's state by name; empty when it holds none.
  auto find = [](const Checkpoint& c, const std::string& tensor) {
    for (const auto& named : c.optimizer_state) {
      if (named.name == tensor) return named.values;
    }
    return std::vector<float>();
  };
  // Worker 0 took a step (its residual is not zero); worker 1 may have taken none yet.
  const std::vector<float> own = find(saved, "rank0/compression/residual");
  EXPECT_GT(std::count_if(own.begin(), own.end(), [](float v) { return v != 0.0f; }), 0);
  EXPECT_EQ(find(saved, "rank1/compression/residual").size(), saved.params.size());
  EXPECT_EQ(find(saved, "ps/residual_workers"), std::vector<float>{2.0f});

  // Nothing left of the epoch: the resumed run pushes nothing, and its epoch checkpoint holds
  // exactly what it restored (the servers' parameters and momentum, each worker's residual).
  const std::string idle = dir("ps-async-idle");
  fs::create_directories(fs::path(idle) / "checkpoints");
  Checkpoint at_end = saved;
  at_end.sampler_position = 240;
  write_checkpoint(idle + "/checkpoints/" + name, at_end);
  Config one = config;
  one.train.epochs = 1;
  one.train.checkpoint_every_steps = 0;
  parameter_servers(one, 2, 1, false, idle, /*resume=*/true);
  const Checkpoint again = read_checkpoint(idle + "/checkpoints/epoch-1.ckpt");
  EXPECT_EQ(again.params, saved.params);
  ASSERT_EQ(again.optimizer_state.size(), saved.optimizer_state.size());
  for (const auto& named : saved.optimizer_state) {
    EXPECT_EQ(find(again, named.name), named.values) << named.name;
  }

  // Resumed at the checkpoint's position: the remaining tickets of both epochs, each once.
  const std::string cut = dir("ps-async-resumed");
  fs::create_directories(fs::path(cut) / "checkpoints");
  write_checkpoint(cut + "/checkpoints/" + name, saved);
  parameter_servers(config, 2, 1, false, cut, /*resume=*/true);
  const nlohmann::json resumed = summary_of(cut);
  std::int64_t pushes = 0;
  for (const auto& count : resumed["parallel"]["per_server"][0]["pushes_per_worker"]) {
    pushes += count.get<std::int64_t>();
  }
  EXPECT_EQ(pushes, 2 * 20 - saved.sampler_position / local);
}

// A stop signal: worker 0 writes a checkpoint inside the epoch after its step, holding the other
// workers' residuals (each sends it before its stop), and --resume finishes the run. ssp with a
// clock checkpoint every step: a worker held by the bound is not waited for (no deadlock).
TEST_F(ParameterServerTrainingTest, AsyncStopAndSspStepCheckpointsInsideAnEpoch) {
  Config config = mlp_config();
  config.parameter_server.consistency = "async";
  config.parameter_server.compression = "topk:0.1";
  const std::string folder = dir("ps-async-stop");
  set_stop_request_for_test(SIGTERM);
  parameter_servers(config, 3, 1, false, folder);
  set_stop_request_for_test(0);
  ASSERT_TRUE(fs::exists(fs::path(folder) / "checkpoints" / "epoch-0-step-1.ckpt"));
  const Checkpoint stopped = read_checkpoint(folder + "/checkpoints/epoch-0-step-1.ckpt");
  std::vector<std::string> names;
  for (const auto& named : stopped.optimizer_state) names.push_back(named.name);
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"rank0/compression/residual", "rank1/compression/residual",
                                       "rank2/compression/residual"}));
  parameter_servers(config, 3, 1, false, folder, /*resume=*/true);
  EXPECT_TRUE(fs::exists(fs::path(folder) / "checkpoints" / "epoch-2.ckpt"));

  Config ssp = config;
  ssp.parameter_server.consistency = "ssp";
  ssp.parameter_server.staleness = 0;
  ssp.train.checkpoint_every_steps = 1;
  const std::string bounded = dir("ps-ssp-clocked");
  for (const auto& worker : parameter_servers(ssp, 3, 2, false, bounded)) {
    for (const float p : worker) ASSERT_TRUE(std::isfinite(p));
  }
  EXPECT_TRUE(fs::exists(fs::path(bounded) / "checkpoints" / "epoch-2.ckpt"));
}

TEST_F(ParameterServerTrainingTest, ConfigMistakesAreNamed) {
  Config config = mlp_config();
  config.parameter_server.backup_workers = 1;
  config.parallel.workers = 3;
  EXPECT_THAT([&] { validate(config); }, ::testing::ThrowsMessage<ConfigError>(
                                             ::testing::HasSubstr("--strategy parameter_server")));
  config.parallel.strategy = "parameter_server";
  config.parameter_server.backup_workers = 3;  // the launcher knows the workers (mpirun): it checks
  EXPECT_THAT(
      [&] {
        run_training(config, TrainerOptions{dir("bad"), false, true, stderr, nullptr, nullptr});
      },
      ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("must be below the 3 workers")));
  config.parameter_server.backup_workers = 0;
  config.parameter_server.pull_every = 4;
  EXPECT_THAT([&] { validate(config); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("async")));
  config.parameter_server.pull_every = 1;
  config.optim.name = "lars";
  EXPECT_THAT([&] { validate(config); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("lars")));
}

}  // namespace
}  // namespace dtrain::train
