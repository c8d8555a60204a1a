// The codecs in the strategies beyond data parallelism (docs/COMPRESSION.md, "Where each strategy
// uses the codecs"): the compressed mean they share (exact where the codec is, error feedback's
// identity, bytes equal to the codec's declared sizes), local SGD's compressed averages, and the
// refusals of a codec where a strategy does not take one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/config.h"
#include "dtrain/train/strategies/compressed_mean.h"
#include "dtrain/train/strategies/federated/federated_run.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// Rank r's vector: small multiples of 1/8, exact in fp16, as are their sums over 3 ranks.
std::vector<float> representable(int rank, std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    v[static_cast<std::size_t>(i)] = static_cast<float>((i * 7 + rank * 5) % 33 - 16) / 8.0f;
  }
  return v;
}

TEST(CompressedMean, Fp16OfRepresentableValuesIsTheExactMeanAndBytesAreTheDeclaredSize) {
  constexpr int kRanks = 3;
  constexpr std::int64_t kN = 1001;
  std::vector<std::vector<float>> out(kRanks);
  comm::spawn_ranks(kRanks, [&](comm::Communicator& comm) {
    CompressedMean mean(comm, compress::parse_codec("fp16"), kN, 5);
    std::vector<float> v = representable(comm.rank(), kN);
    const std::int64_t before = comm.stats().get("allreduce").bytes_sent;
    mean.mean(v.data());
    EXPECT_EQ(mean.payload_bytes(), 2u * kN);
    // Ring allreduce: 2 (P-1)/P x payload, up to the blocks' rounding.
    EXPECT_NEAR(static_cast<double>(comm.stats().get("allreduce").bytes_sent - before),
                mean.predicted_bytes(), 8.0);
    out[static_cast<std::size_t>(comm.rank())] = v;
  });
  for (std::int64_t i = 0; i < kN; ++i) {
    double exact = 0.0;
    for (int r = 0; r < kRanks; ++r) exact += representable(r, kN)[static_cast<std::size_t>(i)];
    // The sum is exact in fp16; / 3 rounds once in f32.
    EXPECT_EQ(out[0][static_cast<std::size_t>(i)], static_cast<float>(exact) / 3.0f) << i;
  }
  EXPECT_EQ(out[1], out[0]);
  EXPECT_EQ(out[2], out[0]);
}

// Error feedback: over T calls, P x sum_t mean_t + sum_r residual_r = sum_t sum_r input_r,t
// (what each rank's codec did not send is in its residual), and the allgather sends exactly
// (P-1) x the codec's declared payload.
TEST(CompressedMean, TopkErrorFeedbackKeepsWhatWasNotSentAndBytesAreTheDeclaredSize) {
  constexpr int kRanks = 2;
  constexpr std::int64_t kN = 300;
  constexpr int kCalls = 5;
  std::vector<double> sent_total(kN, 0.0), input_total(kN, 0.0);
  std::vector<std::vector<float>> residuals(kRanks);
  comm::spawn_ranks(kRanks, [&](comm::Communicator& comm) {
    CompressedMean mean(comm, compress::parse_codec("topk:0.05"), kN, 9);
    ASSERT_TRUE(mean.spec().error_feedback);
    for (int t = 0; t < kCalls; ++t) {
      std::vector<float> v(kN);
      for (std::int64_t i = 0; i < kN; ++i) {
        v[static_cast<std::size_t>(i)] =
            std::sin(static_cast<float>(i * (t + 1) + comm.rank() * 13)) * (1.0f + t);
      }
      if (comm.rank() == 0) {
        for (int r = 0; r < kRanks; ++r) {
          for (std::int64_t i = 0; i < kN; ++i) {
            input_total[static_cast<std::size_t>(i)] +=
                std::sin(static_cast<float>(i * (t + 1) + r * 13)) * (1.0f + t);
          }
        }
      }
      const std::int64_t before = comm.stats().get("allgather").bytes_sent;
      mean.mean(v.data());
      EXPECT_EQ(comm.stats().get("allgather").bytes_sent - before,
                static_cast<std::int64_t>(mean.predicted_bytes()));
      EXPECT_EQ(mean.predicted_bytes(), (kRanks - 1) * 8.0 * 15);  // k = 15, 8 B each
      if (comm.rank() == 0) {
        for (std::int64_t i = 0; i < kN; ++i) {
          sent_total[static_cast<std::size_t>(i)] += kRanks * v[static_cast<std::size_t>(i)];
        }
      }
    }
    residuals[static_cast<std::size_t>(comm.rank())] = mean.residual();
  });
  for (std::int64_t i = 0; i < kN; ++i) {
    double kept = sent_total[static_cast<std::size_t>(i)];
    for (int r = 0; r < kRanks; ++r) kept += residuals[static_cast<std::size_t>(r)][i];
    EXPECT_NEAR(kept, input_total[static_cast<std::size_t>(i)], 1e-4) << i;
  }
}

class CompressedStrategiesTest : public testing::ParallelTrainingTest {
 protected:
  static nlohmann::json parallel_of(const std::string& run_dir) {
    std::ifstream in(fs::path(run_dir) / "summary.json");
    return nlohmann::json::parse(in)["parallel"];
  }
};

// Local SGD: "none" is the f32 average; fp16 deltas follow it to fp16's rounding of the deltas;
// top-k 10% with error feedback trains another trajectory; the averages' bytes are the codec's
// declared sizes exactly (measured by the counters).
TEST_F(CompressedStrategiesTest, LocalSgdAveragesCompressedDeltas) {
  Config config = mlp_config();
  config.train.epochs = 2;
  config.parallel.strategy = "local_sgd";
  config.local_sgd.period = 3;
  const std::vector<float> plain = allreduce_training(config, 2);
  config.local_sgd.compression = "none";
  EXPECT_EQ(allreduce_training(config, 2), plain);
  config.local_sgd.compression = "fp16";
  const std::string fp16_dir = dir("fp16");
  const std::vector<float> fp16 = allreduce_training(config, 2, fp16_dir);
  EXPECT_LT(relative_difference(fp16, plain), 1e-3);
  EXPECT_GT(relative_difference(fp16, plain), 0.0);
  config.local_sgd.compression = "topk:0.1";
  const std::string topk_dir = dir("topk");
  const std::vector<float> topk = allreduce_training(config, 2, topk_dir);
  EXPECT_GT(relative_difference(topk, plain), 1e-3);
  for (const auto& [run_dir, codec] :
       {std::pair{fp16_dir, "fp16"}, std::pair{topk_dir, "topk:0.1"}}) {
    const nlohmann::json parallel = parallel_of(run_dir);
    EXPECT_EQ(parallel["compression"], codec);
    EXPECT_DOUBLE_EQ(parallel["averaging_bytes_sent_per_rank_and_step"].get<double>(),
                     parallel["averaging_bytes_sent_per_rank_and_step_predicted"].get<double>())
        << codec;
    EXPECT_THAT(parallel["averaging_bytes_formula"].get<std::string>(), HasSubstr(codec));
  }
}

TEST_F(CompressedStrategiesTest, LocalSgdResumeWithErrorFeedbackContinuesBitwise) {
  Config config = mlp_config();
  config.train.epochs = 2;
  config.train.checkpoint_every = 1;
  config.parallel.strategy = "local_sgd";
  config.local_sgd.period = 3;
  config.local_sgd.compression = "topk:0.1";
  const std::vector<float> uninterrupted = allreduce_training(config, 2);
  const std::string run_dir = dir("resume");
  Config first = config;
  first.train.epochs = 1;
  allreduce_training(first, 2, run_dir);
  EXPECT_EQ(allreduce_training(config, 2, run_dir, /*resume=*/true), uninterrupted);
}

// CHOCO-SGD with the identity codec (compression none, consensus_step 1) is D-PSGD's gossip; with
// fp16 and top-k it trains another trajectory, and the gossip's bytes are out-degree x the codec's
// declared payload exactly (the point-to-point counter).
TEST_F(CompressedStrategiesTest, DecentralizedChocoGossip) {
  for (const char* topology : {"ring", "exponential"}) {
    Config config = mlp_config();
    config.train.epochs = 2;
    config.parallel.strategy = "decentralized";
    config.decentralized.topology = topology;
    const std::vector<float> plain = allreduce_training(config, 4);
    config.decentralized.consensus_step = 1.0;
    const std::string identity_dir = dir("identity");
    const std::vector<float> identity = allreduce_training(config, 4, identity_dir);
    EXPECT_LT(relative_difference(identity, plain), 1e-6) << topology;
    const nlohmann::json identity_parallel = parallel_of(identity_dir);
    EXPECT_DOUBLE_EQ(
        identity_parallel["gossip_bytes_sent_per_rank_and_step"].get<double>(),
        identity_parallel["gossip_bytes_sent_per_rank_and_step_predicted"].get<double>());
    for (const char* codec : {"fp16", "topk:0.1"}) {
      config.decentralized.compression = codec;
      config.decentralized.consensus_step = 0.0;
      const std::string run_dir = dir("choco");
      const std::vector<float> compressed = allreduce_training(config, 4, run_dir);
      EXPECT_GT(relative_difference(compressed, plain), 0.0) << codec;
      EXPECT_LT(relative_difference(compressed, plain), 0.5) << codec;
      const nlohmann::json parallel = parallel_of(run_dir);
      EXPECT_EQ(parallel["compression"], codec);
      // fp16: 1; top-k keeping k of N: min(0.4, 10 k / N) = 0.4.
      EXPECT_NEAR(parallel["consensus_step"].get<double>(),
                  std::string(codec) == "fp16" ? 1.0 : 0.4, 0.01);
      EXPECT_DOUBLE_EQ(parallel["gossip_bytes_sent_per_rank_and_step"].get<double>(),
                       parallel["gossip_bytes_sent_per_rank_and_step_predicted"].get<double>())
          << codec;
      EXPECT_THAT(parallel["gossip_bytes_formula"].get<std::string>(), HasSubstr(codec));
    }
  }
}

// A resume rebuilds CHOCO's public copies from the restored replicas (one exact neighbour
// allreduce): with the identity codec and gamma = 1 that is where the uninterrupted run's copies
// are, so the resumed run ends where it does (to rounding); with top-k it runs on.
TEST_F(CompressedStrategiesTest, DecentralizedChocoResumeRebuildsThePublicCopies) {
  Config config = mlp_config();
  config.train.epochs = 2;
  config.train.checkpoint_every = 1;
  config.parallel.strategy = "decentralized";
  config.decentralized.topology = "ring";
  for (const char* codec : {"none", "topk:0.1"}) {
    config.decentralized.compression = codec;
    config.decentralized.consensus_step = std::string(codec) == "none" ? 1.0 : 0.0;
    const std::vector<float> uninterrupted = allreduce_training(config, 3);
    const std::string run_dir = dir("resume");
    Config first = config;
    first.train.epochs = 1;
    allreduce_training(first, 3, run_dir);
    const std::vector<float> resumed = allreduce_training(config, 3, run_dir, /*resume=*/true);
    EXPECT_LT(relative_difference(resumed, uninterrupted),
              std::string(codec) == "none" ? 1e-6 : 0.1)
        << codec;
  }
}

// Federated averaging: fp16 uploads (and downloads) follow uncompressed FedAvg to fp16's rounding
// of the deltas; top-k 10% uploads train on; bytes up and down are the codec's declared sizes.
TEST_F(CompressedStrategiesTest, FederatedCompressesUploadsAndDownloads) {
  Config config = mlp_config();
  config.parallel.strategy = "federated";
  config.federated.clients = 12;
  config.federated.client_fraction = 0.5;
  config.federated.rounds = 4;
  const auto run = [&](const Config& c) {
    std::vector<float> params;
    RunSummary summary;
    TrainerOptions o;
    o.run_dir = dir("fed");
    o.quiet = true;
    comm::spawn_ranks(
        2,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          FederatedRun federated(&comm, c, o, nullptr);
          RunSummary mine = federated.run();
          if (comm.rank() == 0) {
            params.assign(federated.global_params().begin(), federated.global_params().end());
            summary = std::move(mine);
          }
        },
        comm_options());
    return std::pair{params, summary};
  };
  const auto [plain, plain_summary] = run(config);
  const std::int64_t n = plain_summary.parameters;
  const auto completed = plain_summary.parallel["completed_clients"].get<std::int64_t>();
  for (const bool download : {false, true}) {
    for (const char* codec : {"fp16", "topk:0.1"}) {
      Config c = config;
      c.federated.compression = codec;
      c.federated.compress_download = download;
      const auto [params, summary] = run(c);
      const std::string what = fmt::format("{} download {}", codec, download);
      const std::int64_t payload = std::string(codec) == "fp16" ? 2 * n : 8 * ((n + 5) / 10);
      EXPECT_EQ(summary.parallel["upload_bytes_per_client"].get<std::int64_t>(), payload) << what;
      EXPECT_EQ(summary.parallel["bytes_up"].get<std::int64_t>(), completed * payload) << what;
      EXPECT_EQ(summary.parallel["bytes_down"].get<std::int64_t>(),
                4 * 6 * (download ? payload : 4 * n))
          << what;
      if (std::string(codec) == "fp16") {
        EXPECT_GT(relative_difference(params, plain), 0.0) << what;
        EXPECT_LT(relative_difference(params, plain), 1e-3) << what;
      } else {
        EXPECT_LT(relative_difference(params, plain), 0.5) << what;
      }
    }
  }
}

// A codec where the strategy takes none is an error naming the strategies that do; PowerSGD is
// refused where a model delta is sent.
TEST(CompressedStrategiesConfig, RefusalsNameWhatIsAccepted) {
  for (const char* strategy : {"hogwild", "pipeline", "tensor_parallel", "hybrid", "spatial"}) {
    EXPECT_THAT(
        [&] {
          parse_config(fmt::format("[parallel]\nstrategy = \"{}\"\n[data_parallel]\ncompression = "
                                   "\"topk:0.01\"\n",
                                   strategy),
                       "test.toml");
        },
        ::testing::ThrowsMessage<ConfigError>(
            HasSubstr("taken by data_parallel, parameter_server, local_sgd, decentralized")))
        << strategy;
  }
  EXPECT_THAT(
      [] {
        parse_config(
            "[parallel]\nstrategy = \"data_parallel\"\n[local_sgd]\ncompression = "
            "\"fp16\"\n",
            "test.toml");
      },
      ::testing::ThrowsMessage<ConfigError>(HasSubstr("local_sgd.compression")));
  // CHOCO's public copies need a static topology and the local step first.
  for (const char* extra :
       {"topology = \"one-peer-exponential\"\n", "topology = \"ring\"\noverlap = true\n"}) {
    EXPECT_THAT(
        [&] {
          parse_config(fmt::format("[parallel]\nstrategy = \"decentralized\"\n[decentralized]\n"
                                   "compression = \"fp16\"\n{}",
                                   extra),
                       "test.toml");
        },
        ::testing::ThrowsMessage<ConfigError>(HasSubstr("static topology")))
        << extra;
  }
  for (const char* strategy : {"local_sgd", "decentralized", "federated"}) {
    EXPECT_THAT(
        [&] {
          parse_config(fmt::format("[parallel]\nstrategy = \"{0}\"\n[{0}]\ncompression = "
                                   "\"powersgd:2\"\n",
                                   strategy),
                       "test.toml");
        },
        ::testing::ThrowsMessage<ConfigError>(HasSubstr("PowerSGD")))
        << strategy;
    EXPECT_THAT(
        [&] {
          parse_config(fmt::format("[parallel]\nstrategy = \"{0}\"\n[{0}]\ncompression = "
                                   "\"topk:0\"\n",
                                   strategy),
                       "test.toml");
        },
        ::testing::ThrowsMessage<ConfigError>(HasSubstr("accepted")))
        << strategy;
  }
}

}  // namespace
}  // namespace dtrain::train
