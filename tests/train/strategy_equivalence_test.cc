// One table of every strategy that trains the trajectory of one worker: each row trains the same
// config (an MLP with momentum, 2 epochs of 10 steps) its way, and its parameters are compared
// with one worker's. A strategy whose arithmetic is the single worker's is bitwise equal; one that
// sums the ranks' gradients in another order differs by rounding only. Every later strategy that
// should follow the same trajectory adds a row.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>

#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/strategies/parameter_server/ps_run.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class StrategyEquivalence : public testing::ParallelTrainingTest {
 public:
  static Config base_config() {
    Config c = mlp_config();
    c.train.epochs = 2;
    return c;
  }

  std::vector<float> single_worker(const Config& config) {
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  // Rank 0's parameters (equal on every rank) after `ranks` ranks as threads train `config`.
  std::vector<float> ranks_training(const Config& config, int ranks) {
    return allreduce_training(config, ranks);
  }

  // Worker 0's parameters after parameter-server training (servers as ranks of their own).
  std::vector<float> parameter_servers(Config config, int workers, int servers) {
    config.parallel.strategy = "parameter_server";
    config.parallel.workers = workers;
    config.parameter_server.servers = servers;
    const std::string run_dir = dir("ps");
    const auto data = std::make_shared<const RunData>(load_run_data(config.data));
    std::vector<float> params;
    comm::spawn_ranks(
        ps_thread_ranks(config),
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions options{run_dir, false, true, stderr, nullptr, nullptr};
          run_ps_rank(comm, config, options, data, [&](Trainer& trainer) {
            if (comm.rank() != 0) return;
            const auto& store = trainer.model().store();
            params.assign(store.params(), store.params() + store.num_params());
          });
        },
        comm_options());
    return params;
  }
};

struct Row {
  const char* name;
  // Trains the config its way; returns the parameters.
  std::function<std::vector<float>(StrategyEquivalence&, Config)> train;
  // Largest |difference| from one worker: 0 for bitwise.
  float tolerance;
};

// A row of `ranks` ranks as threads training the config after `edit`.
Row ranks_row(const char* name, int ranks, std::function<void(Config&)> edit, float tolerance) {
  return Row{name,
             [ranks, edit](StrategyEquivalence& test, Config c) {
               edit(c);
               return test.ranks_training(c, ranks);
             },
             tolerance};
}

// (std::string("0"): GCC 12 reports a false -Wrestrict for short literals assigned at -O3.)
TEST_F(StrategyEquivalence, EveryStrategyTrainsTheSingleWorkerTrajectory) {
  const std::vector<Row> rows = {
      ranks_row(
          "one rank through the launcher (allreduce, P = 1)", 1, [](Config&) {}, 0.0f),
      ranks_row(
          "allreduce ring, P = 2, optimizer replicated", 2,
          [](Config& c) { c.data_parallel.zero_stage = std::string("0"); }, 1e-6f),
      ranks_row(
          "allreduce halving-doubling, P = 4", 4,
          [](Config& c) { c.parallel.allreduce = "halving-doubling"; }, 1e-6f),
      ranks_row(
          "ZeRO-1, reduce-scatter, P = 2", 2,
          [](Config& c) {
            c.data_parallel.zero_stage = std::string("1");
            c.data_parallel.sum_in_update = "false";
          },
          1e-6f),
      ranks_row(
          "ZeRO-1, sums fused into the update, P = 3", 3,
          [](Config& c) {
            c.data_parallel.zero_stage = std::string("1");
            c.data_parallel.sum_in_update = "true";
            c.data_parallel.overlap = "false";
          },
          1e-6f),
      Row{"parameter servers, bsp, 2 workers x 2 servers",
          [](StrategyEquivalence& test, Config c) { return test.parameter_servers(c, 2, 2); },
          1e-6f},
      ranks_row(
          "local SGD, H = 1, P = 2", 2,
          [](Config& c) {
            c.parallel.strategy = "local_sgd";
            c.local_sgd.period = 1;
          },
          1e-6f),
      ranks_row(
          "decentralized, topology full, P = 4", 4,
          [](Config& c) {
            c.parallel.strategy = "decentralized";
            c.decentralized.topology = "full";
          },
          1e-6f),
      // One micro-batch per step: the unsplit model's arithmetic, layer range by layer range
      // (more micro-batches equal train.accumulate_steps = m: tests/train/pipeline_test.cc).
      ranks_row(
          "pipeline, 3 stages, 1F1B, 1 micro-batch", 3,
          [](Config& c) {
            c.parallel.strategy = "pipeline";
            c.pipeline.micro_batches = 1;
          },
          0.0f),
      // Seed 003's all-gather form (tests/train/tensor_parallel_test.cc has the GPT's Megatron
      // split): the same products, fc2's and fc3's input gradients summed over the ranks.
      ranks_row(
          "tensor parallel, all-gather MLP, P = 2", 2,
          [](Config& c) { c.parallel.strategy = "tensor_parallel"; }, 1e-6f),
      // The grid (tests/train/hybrid_test.cc): each stage's or shard's gradients summed over its
      // data group, the replicas' halves of the batch added by the allreduce.
      ranks_row(
          "hybrid, dp 2 x pp 2, 1 micro-batch", 4,
          [](Config& c) {
            c.parallel.strategy = "hybrid";
            c.hybrid.dp = 2;
            c.hybrid.pp = 2;
            c.pipeline.micro_batches = 1;
          },
          1e-6f),
      ranks_row(
          "hybrid, dp 2 x tp 2", 4,
          [](Config& c) {
            c.parallel.strategy = "hybrid";
            c.hybrid.dp = 2;
            c.hybrid.tp = 2;
          },
          1e-6f),
  };
  const Config config = base_config();
  const std::vector<float> reference = single_worker(config);
  for (const Row& row : rows) {
    const std::vector<float> params = row.train(*this, config);
    ASSERT_EQ(params.size(), reference.size()) << row.name;
    float worst = 0.0f;
    for (std::size_t i = 0; i < params.size(); ++i) {
      worst = std::max(worst, std::abs(params[i] - reference[i]));
    }
    std::fprintf(stderr, "%-55s max |diff| %.3g\n", row.name, static_cast<double>(worst));
    if (row.tolerance == 0.0f) {
      EXPECT_EQ(params, reference) << row.name << ": not bitwise (max |diff| " << worst << ")";
    } else {
      EXPECT_LE(worst, row.tolerance) << row.name;
    }
  }
}

}  // namespace
}  // namespace dtrain::train
