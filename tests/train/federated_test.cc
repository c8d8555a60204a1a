// Federated averaging (parallel.strategy = "federated"): one client with one full-batch local
// epoch is plain SGD, round after round; the server's weighted average against a hand computation
// over two ranks; FedProx with mu = 0 is FedAvg and mu > 0 keeps a client nearer the global model;
// the rank count does not change what is trained; failed clients are dropped and counted; the
// round plan and the bad-input errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <fstream>
#include <set>

#include "dtrain/base/error.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/strategies/federated/client_update.h"
#include "dtrain/train/strategies/federated/federated_average.h"
#include "dtrain/train/strategies/federated/federated_run.h"
#include "dtrain/train/strategies/federated/round_plan.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class FederatedTest : public testing::ParallelTrainingTest {
 protected:
  // mlp_config's 240 synthetic samples as `clients` clients.
  static Config federated_config(std::int64_t clients, double fraction, std::int64_t rounds) {
    Config c = mlp_config();
    c.parallel.strategy = "federated";
    c.federated.clients = clients;
    c.federated.client_fraction = fraction;
    c.federated.rounds = rounds;
    c.train.accuracy_targets = {0.5};
    return c;
  }

  TrainerOptions options(const std::string& name) {
    TrainerOptions o;
    o.run_dir = dir(name);
    o.quiet = true;
    return o;
  }

  // The global model after `config`'s rounds on `ranks` ranks as threads (rank 0's; every rank's
  // is checked equal), and rank 0's summary.
  std::pair<std::vector<float>, RunSummary> federated(const Config& config, int ranks) {
    return federated(config, ranks, options("fed"));
  }
  std::pair<std::vector<float>, RunSummary> federated(const Config& config, int ranks,
                                                      const TrainerOptions& o) {
    std::vector<std::vector<float>> params(static_cast<std::size_t>(ranks));
    RunSummary summary;
    comm::spawn_ranks(
        ranks,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          FederatedRun run(&comm, config, o, nullptr);
          RunSummary mine = run.run();
          params[static_cast<std::size_t>(comm.rank())].assign(run.global_params().begin(),
                                                               run.global_params().end());
          if (comm.rank() == 0) summary = std::move(mine);
        },
        comm_options());
    for (int r = 1; r < ranks; ++r) EXPECT_EQ(params[static_cast<std::size_t>(r)], params[0]);
    return {params[0], summary};
  }

  // One worker's parameters after `config` (its own strategy: one worker).
  std::vector<float> one_worker(Config config) {
    config.parallel.strategy = "data_parallel";
    set_compute_threads(1);
    Trainer trainer(config, options("sgd"));
    trainer.run();
    const auto& store = trainer.model().store();
    return std::vector<float>(store.params(), store.params() + store.num_params());
  }

  static float max_abs_difference(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
    }
    return worst;
  }

  static nlohmann::json json_of(const std::string& path) {
    std::ifstream in(path);
    return nlohmann::json::parse(in);
  }
};

// K = 1, C = 1, E = 1, B = the whole set: each round is one full-batch gradient step from the
// global model, so R rounds are R epochs of full-batch SGD (momentum 0: a client's optimizer starts
// fresh every round). Only the order of the samples in the batch differs (GEMM sums), hence 1e-6.
TEST_F(FederatedTest, OneClientOneFullBatchEpochIsPlainSgd) {
  for (const std::int64_t rounds : {1, 3}) {
    Config sgd = mlp_config();
    sgd.train.batch_size = 240;
    sgd.train.epochs = rounds;
    sgd.optim.momentum = rounds == 1 ? 0.9 : 0.0;  // one step: momentum's first step is SGD's
    Config fed = federated_config(1, 1.0, rounds);
    fed.train.batch_size = 240;
    fed.optim = sgd.optim;
    const auto [global, summary] = federated(fed, 1);
    const std::vector<float> expected = one_worker(sgd);
    EXPECT_LT(max_abs_difference(global, expected), 1e-6f) << rounds << " rounds";
    EXPECT_NE(global, std::vector<float>(global.size(), 0.0f));
    EXPECT_EQ(summary.steps, rounds);
    EXPECT_EQ(summary.samples, 240 * rounds);
  }
}

// Rank 0 holds clients (n = 1, w = [1, 2, 3], buffer 10) and (n = 3, [5, 6, 7], 20), rank 1 holds
// (n = 4, [-1, 0, 1], 30): the average is ([1 + 15 - 4, 2 + 18 + 0, 3 + 21 + 4] / 8, (10 + 60 +
// 120) / 8) = ([1.5, 2.5, 3.5], 23.75).
TEST_F(FederatedTest, WeightedAverageMatchesAHandComputation) {
  std::vector<std::vector<float>> params(2), buffers(2);
  std::vector<RoundCounts> counts(2);
  comm::spawn_ranks(
      2,
      [&](comm::Communicator& comm) {
        FederatedAverage average(3, 1);
        average.reset();
        if (comm.rank() == 0) {
          average.add(1, std::vector<float>{1, 2, 3}, std::vector<float>{10});
          average.add(3, std::vector<float>{5, 6, 7}, std::vector<float>{20});
          average.counts().samples = 4;
          average.counts().completed = 2;
        } else {
          average.add(4, std::vector<float>{-1, 0, 1}, std::vector<float>{30});
          average.counts().samples = 4;
          average.counts().completed = 1;
          average.counts().failed = 1;
        }
        average.allreduce(&comm);
        std::vector<float> p(3, -7.0f), b(1, -7.0f);
        EXPECT_TRUE(average.average_into(p, b));
        params[static_cast<std::size_t>(comm.rank())] = p;
        buffers[static_cast<std::size_t>(comm.rank())] = b;
        counts[static_cast<std::size_t>(comm.rank())] = average.counts();
      },
      comm_options());
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(params[static_cast<std::size_t>(r)], (std::vector<float>{1.5f, 2.5f, 3.5f}));
    EXPECT_EQ(buffers[static_cast<std::size_t>(r)], (std::vector<float>{23.75f}));
    EXPECT_EQ(counts[static_cast<std::size_t>(r)].completed, 3.0);
    EXPECT_EQ(counts[static_cast<std::size_t>(r)].failed, 1.0);
    EXPECT_EQ(counts[static_cast<std::size_t>(r)].samples, 8.0);
  }
  // No participant completed: the global model is left as it was.
  FederatedAverage empty(2, 0);
  empty.reset();
  std::vector<float> p{4.0f, 5.0f};
  EXPECT_FALSE(empty.average_into(p, std::span<float>()));
  EXPECT_EQ(p, (std::vector<float>{4.0f, 5.0f}));
}

// The weighted average of one client is its model bitwise (n w / n in f64).
TEST_F(FederatedTest, AverageOfOneClientIsItsModel) {
  FederatedAverage average(4, 0);
  average.reset();
  const std::vector<float> w{0.1f, -3.7e-5f, 12345.678f, 1e-30f};
  average.add(37, w, std::span<const float>());
  average.counts().samples = 37;
  std::vector<float> out(4);
  ASSERT_TRUE(average.average_into(out, std::span<float>()));
  EXPECT_EQ(out, w);
}

TEST_F(FederatedTest, FedProxWithMuZeroIsFedAvg) {
  Config fedavg = federated_config(6, 0.5, 3);
  fedavg.federated.local_epochs = 2;
  Config fedprox = fedavg;
  fedprox.federated.fedprox_mu = 0.0;
  EXPECT_EQ(federated(fedavg, 1).first, federated(fedprox, 1).first);
}

// grads += mu (w - w_g), element by element.
TEST_F(FederatedTest, ProximalGradientIsMuTimesTheDistance) {
  std::vector<float> grads{1.0f, -2.0f, 0.5f};
  const std::vector<float> params{3.0f, 1.0f, -1.0f};
  const std::vector<float> global{1.0f, 1.0f, 1.0f};
  add_proximal_gradient(grads.data(), params.data(), global.data(), 3, 0.5);
  EXPECT_EQ(grads, (std::vector<float>{2.0f, -2.0f, -0.5f}));
}

// The proximal term pulls the client's model towards the global one: after 5 local epochs the
// client has moved less from w_g with mu = 1 than with mu = 0.
TEST_F(FederatedTest, FedProxKeepsTheClientNearerTheGlobalModel) {
  auto drift = [&](double mu) {
    Config c = federated_config(4, 1.0, 1);
    c.federated.local_epochs = 5;
    c.federated.fedprox_mu = mu;
    c.optim.momentum = 0.0;
    const RunData data = load_run_data(c.data);
    auto model = nn::build_model(model_spec(c.model, data.train.sample_shape(), 4));
    model->init(1);
    const std::vector<float> global(model->store().params(),
                                    model->store().params() + model->store().num_params());
    ClientTrainer trainer(c, *model, data.train);
    std::vector<std::int64_t> indices(60);
    for (std::size_t i = 0; i < indices.size(); ++i) indices[i] = static_cast<std::int64_t>(i);
    trainer.train(indices, global, std::span<const float>(), 0, 0, false);
    double distance = 0.0;
    for (std::size_t i = 0; i < global.size(); ++i) {
      const double d = static_cast<double>(model->store().params()[i]) - global[i];
      distance += d * d;
    }
    return std::sqrt(distance);
  };
  const double free = drift(0.0);
  const double held = drift(1.0);
  EXPECT_GT(free, 0.0);
  EXPECT_LT(held, 0.9 * free);
}

// The ranks only share out the clients: 1, 2 and 3 ranks train the same global model (the f64
// sums' order may differ in the last bit of a float).
TEST_F(FederatedTest, RankCountDoesNotChangeTheTraining) {
  Config c = federated_config(6, 0.5, 4);
  c.federated.partition = "dirichlet:0.5";
  const auto [one, summary] = federated(c, 1);
  for (const int ranks : {2, 3}) {
    EXPECT_LT(max_abs_difference(federated(c, ranks).first, one), 1e-6f) << ranks;
  }
  EXPECT_GT(summary.final_test_accuracy, 0.5);
}

// Round records, bytes against the formula, partition.json, targets' rounds and bytes.
TEST_F(FederatedTest, RunFolderReportsRoundsBytesAndThePartition) {
  Config c = federated_config(8, 0.25, 5);
  c.federated.partition = "shards";
  const TrainerOptions o = options("report");
  FederatedRun run(nullptr, c, o, nullptr);
  const RunSummary summary = run.run();
  const std::int64_t n = summary.parameters;
  const nlohmann::json parallel = summary.parallel;
  EXPECT_EQ(parallel["clients_per_round"], 2);
  EXPECT_EQ(parallel["bytes_down"], 5 * 2 * 4 * n);
  EXPECT_EQ(parallel["bytes_up"], 5 * 2 * 4 * n);
  EXPECT_EQ(parallel["bytes_down"], parallel["bytes_down_predicted"]);
  std::ifstream metrics(fs::path(o.run_dir) / "metrics.jsonl");
  std::string line;
  int rounds = 0;
  while (std::getline(metrics, line)) {
    const auto record = nlohmann::json::parse(line);
    ++rounds;
    EXPECT_EQ(record["kind"], "round");
    EXPECT_EQ(record["round"], rounds);
    EXPECT_EQ(record["participants"], 2);
    EXPECT_EQ(record["bytes_up"], 2 * 4 * n);
    EXPECT_EQ(record["bytes_total"], rounds * 4 * 4 * n);
  }
  EXPECT_EQ(rounds, 5);
  const auto reached = parallel["rounds_to_accuracy"]["0.5"];
  if (!reached.is_null()) {
    EXPECT_EQ(parallel["bytes_to_accuracy"]["0.5"], reached.get<std::int64_t>() * 4 * 4 * n);
  }
  const nlohmann::json partition = json_of((fs::path(o.run_dir) / "partition.json").string());
  EXPECT_EQ(partition["partition"], "shards:2");
  EXPECT_EQ(partition["sizes"].size(), 8u);
  EXPECT_EQ(partition["label_histogram"].size(), 8u);
  std::int64_t total = 0;
  for (const auto& size : partition["sizes"]) total += size.get<std::int64_t>();
  EXPECT_EQ(total, 240);
}

// Injected failures: the failed clients are dropped and counted, the rounds go on; when every
// participant fails the global model stays the initial one.
TEST_F(FederatedTest, FailedClientsAreDroppedAndCounted) {
  Config c = federated_config(10, 0.5, 6);
  c.federated.client_failure = 0.4;
  const auto [global, summary] = federated(c, 2);
  const auto failed = summary.parallel["failed_clients"].get<std::int64_t>();
  const auto completed = summary.parallel["completed_clients"].get<std::int64_t>();
  EXPECT_EQ(failed + completed, 6 * 5);
  EXPECT_GT(failed, 0);
  EXPECT_GT(completed, 0);
  std::int64_t expected_failures = 0;
  for (std::int64_t round = 0; round < 6; ++round) {
    for (const std::int64_t client : sample_round_clients(10, 5, 3, round)) {
      expected_failures += client_fails(0.4, 3, round, client) ? 1 : 0;
    }
  }
  EXPECT_EQ(failed, expected_failures);
  EXPECT_EQ(summary.parallel["bytes_up"].get<std::int64_t>(), completed * 4 * summary.parameters);

  Config all = federated_config(4, 1.0, 2);
  all.federated.client_failure = 1.0;
  FederatedRun run(nullptr, all, options("all"), nullptr);
  const std::vector<float> initial(run.global_params().begin(), run.global_params().end());
  const RunSummary none = run.run();
  EXPECT_EQ(std::vector<float>(run.global_params().begin(), run.global_params().end()), initial);
  EXPECT_EQ(none.parallel["failed_clients"], 8);
}

// SIGTERM during a round: every rank stops after it, summary.json covers the rounds run and
// carries the signal (the dtrain command exits 128 + it).
TEST_F(FederatedTest, StopSignalEndsTheRunAfterTheRound) {
  set_stop_request_for_test(SIGTERM);
  const auto [global, summary] = federated(federated_config(6, 0.5, 5), 2);
  set_stop_request_for_test(0);
  EXPECT_EQ(summary.stopped_by_signal, SIGTERM);
  EXPECT_EQ(summary.epochs, 1);
  EXPECT_EQ(summary.parallel["rounds"], 1);
  EXPECT_EQ(summary.parallel["rounds_planned"], 5);
  EXPECT_EQ(summary.parallel["bytes_down"], 3 * 4 * summary.parameters);
}

// A run stopped after round 2 of 4 (federated.rounds = 2, then --resume with 4) ends where the
// uninterrupted run does, bit for bit on as many ranks (the global model, and with compressed
// downloads the server's residual, are all the state a round carries), and within f64 rounding on
// another number of ranks; its summary and metrics.jsonl read as one run's.
TEST_F(FederatedTest, ResumeContinuesTheUninterruptedRun) {
  for (const bool compressed : {false, true}) {
    Config whole = federated_config(6, 0.5, 4);
    if (compressed) {
      whole.federated.compression = "topk:0.25";  // error feedback at the server by default
      whole.federated.compress_download = true;
    }
    const std::string tag = compressed ? "topk" : "f32";
    const auto [expected, expected_summary] = federated(whole, 2, options("whole-" + tag));

    Config first = whole;
    first.federated.rounds = 2;
    const TrainerOptions cut = options("cut-" + tag);
    federated(first, 2, cut);
    EXPECT_TRUE(fs::exists(fs::path(cut.run_dir) / "checkpoints" / "epoch-2.ckpt"));
    TrainerOptions again = cut;
    again.resume = true;
    const auto [resumed, summary] = federated(whole, 2, again);
    EXPECT_EQ(resumed, expected) << tag;
    EXPECT_EQ(summary.resumed_from_epoch, 2);
    EXPECT_EQ(summary.parallel["bytes_down"], expected_summary.parallel["bytes_down"]);
    EXPECT_EQ(summary.parallel["bytes_up"], expected_summary.parallel["bytes_up"]);
    EXPECT_EQ(summary.parallel["round_test_accuracy"],
              expected_summary.parallel["round_test_accuracy"]);
    EXPECT_EQ(summary.steps, expected_summary.steps);
    std::ifstream records(fs::path(cut.run_dir) / "metrics.jsonl");
    std::vector<std::int64_t> rounds;
    for (std::string line; std::getline(records, line);) {
      rounds.push_back(nlohmann::json::parse(line)["round"].get<std::int64_t>());
    }
    EXPECT_EQ(rounds, (std::vector<std::int64_t>{1, 2, 3, 4}));

    // Another number of ranks: the same clients, the sum in another order.
    const TrainerOptions cut3 = options("cut3-" + tag);
    federated(first, 2, cut3);
    TrainerOptions on3 = cut3;
    on3.resume = true;
    const auto [on_three, summary3] = federated(whole, 3, on3);
    EXPECT_LT(max_abs_difference(on_three, expected), 1e-6f) << tag;
    EXPECT_EQ(summary3.parallel["bytes_up"], expected_summary.parallel["bytes_up"]);
  }
}

// A stop after the round writes a checkpoint and no summary.json; --resume finishes the run.
TEST_F(FederatedTest, AStoppedRunResumesFromItsStopCheckpoint) {
  const Config c = federated_config(6, 0.5, 3);
  const auto [expected, unused] = federated(c, 2, options("plain"));
  const TrainerOptions o = options("stopped");
  set_stop_request_for_test(SIGTERM);
  federated(c, 2, o);
  set_stop_request_for_test(0);
  EXPECT_TRUE(fs::exists(fs::path(o.run_dir) / "checkpoints" / "epoch-1.ckpt"));
  EXPECT_FALSE(fs::exists(fs::path(o.run_dir) / "summary.json"));
  TrainerOptions again = o;
  again.resume = true;
  EXPECT_EQ(federated(c, 2, again).first, expected);
  EXPECT_TRUE(fs::exists(fs::path(o.run_dir) / "summary.json"));
  try {
    federated(c, 2, again);
    FAIL() << "a finished run resumed";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("nothing left to train; pass --rounds N with N > 3"));
  }
  // Past the end as configured (fewer rounds than done), summary.json missing: refused before
  // anything is rewritten, not a summary of 2 rounds.
  fs::remove(fs::path(o.run_dir) / "summary.json");
  Config fewer = c;
  fewer.federated.rounds = 2;
  try {
    federated(fewer, 2, again);
    FAIL() << "a run past its configured rounds resumed";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("epoch-3.ckpt is past --rounds 2 (3 rounds done); give "
                                    "--rounds 4 or more to continue it"));
  }
  EXPECT_FALSE(fs::exists(fs::path(o.run_dir) / "summary.json"));
}

TEST(FederatedRoundPlan, SamplesMDistinctClientsPerRoundReproducibly) {
  EXPECT_EQ(clients_per_round(100, 0.1), 10);
  EXPECT_EQ(clients_per_round(30, 0.1), 3);
  EXPECT_EQ(clients_per_round(5, 0.01), 1);
  EXPECT_EQ(clients_per_round(7, 1.0), 7);
  std::set<std::vector<std::int64_t>> distinct;
  for (std::int64_t round = 0; round < 20; ++round) {
    const auto a = sample_round_clients(100, 10, 5, round);
    EXPECT_EQ(a, sample_round_clients(100, 10, 5, round));
    EXPECT_EQ(a.size(), 10u);
    EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
    EXPECT_EQ(std::set<std::int64_t>(a.begin(), a.end()).size(), 10u);
    EXPECT_GE(a.front(), 0);
    EXPECT_LT(a.back(), 100);
    distinct.insert(a);
  }
  EXPECT_EQ(distinct.size(), 20u);
  const std::vector<std::int64_t> participants{3, 8, 9, 14, 20};
  EXPECT_EQ(rank_clients(participants, 0, 2), (std::vector<std::int64_t>{3, 9, 20}));
  EXPECT_EQ(rank_clients(participants, 1, 2), (std::vector<std::int64_t>{8, 14}));
}

TEST_F(FederatedTest, BadInputIsAOneLineErrorWithTheNumbers) {
  Config c = federated_config(2, 1.0, 1);
  try {
    federated(c, 3);
    FAIL() << "3 ranks for 2 clients accepted";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("federated.clients = 2 is fewer than the 3 ranks"));
  }
  for (const char* fraction : {"0", "1.5", "-0.1"}) {
    try {
      parse_config("[parallel]\nstrategy = \"federated\"\n", "test.toml",
                   {std::string("federated.client_fraction=") + fraction});
      FAIL() << fraction;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr("federated.client_fraction"));
      EXPECT_THAT(e.what(), HasSubstr("0 < value <= 1"));
    }
  }
  try {
    parse_config("[federated]\npartition = \"dirichlet:0\"\n", "test.toml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("federated.partition"));
    EXPECT_THAT(e.what(), HasSubstr("alpha = 0 must be > 0"));
  }
  Config many = federated_config(241, 0.1, 1);
  EXPECT_THROW(federated(many, 1), ConfigError);
  // A fresh run into a folder that holds one sends the user to --resume.
  const TrainerOptions twice = options("twice");
  federated(federated_config(4, 1.0, 1), 1, twice);
  try {
    federated(federated_config(4, 1.0, 1), 1, twice);
    FAIL() << "a second run into the same folder";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("continue it with --resume"));
  }
}

}  // namespace
}  // namespace dtrain::train
