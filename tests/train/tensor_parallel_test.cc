// The tensor-parallel strategy (strategies/tensor_parallel/): a GPT split over P ranks by heads
// and MLP units trains one worker's trajectory to rounding (1e-5 relative after K steps) for
// P = 2, 3, 4; its allreduce bytes per step equal seed 003's formula exactly; a resumed run
// equals the uninterrupted one (and resumes on another rank count); a split that does not divide
// the heads is one ConfigError naming the numbers, before anything trains.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class TensorParallelTest : public testing::ParallelTrainingTest {
 public:
  // small_gpt_config's GPT, with AdamW when `adamw`.
  Config gpt(std::int64_t heads, std::int64_t d, bool adamw) {
    Config c = small_gpt_config("tensor", heads, d);
    c.train.seed = 3;
    c.train.checkpoint_every = 1;
    if (adamw) {
      c.optim.name = "adamw";
      c.optim.momentum = 0.0;
      c.optim.lr = 0.003;
      c.optim.weight_decay = 0.1;
    }
    c.parallel.allreduce = "ring";
    c.parallel.strategy = "tensor_parallel";
    return c;
  }

  std::vector<float> one_worker(Config config) {
    config.parallel.strategy = "data_parallel";
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  static nlohmann::json summary_of(const std::string& run) {
    std::ifstream in(std::filesystem::path(run) / "summary.json");
    return nlohmann::json::parse(in);
  }
};

TEST_F(TensorParallelTest, SplitGptFollowsOneWorkerToRounding) {
  // 8 steps. The row-parallel layers sum their partial products over the ranks in another order
  // than one GEMM does, so the trajectories agree to rounding, not bitwise.
  struct Case {
    std::int64_t heads, d;
    int p;
  };
  for (const bool adamw : {false, true}) {
    for (const Case& k : {Case{4, 16, 2}, Case{4, 16, 4}, Case{6, 24, 3}}) {
      const Config c = gpt(k.heads, k.d, adamw);
      const std::vector<float> reference = one_worker(c);
      const std::vector<float> params = allreduce_training(c, k.p);
      const double relative = relative_difference(params, reference);
      std::fprintf(stderr, "tensor_parallel %s p=%d heads=%ld d=%ld: relative %.3g\n",
                   adamw ? "adamw" : "sgd", k.p, static_cast<long>(k.heads), static_cast<long>(k.d),
                   relative);
      EXPECT_LE(relative, 1e-5) << "p=" << k.p << (adamw ? " adamw" : " sgd");
    }
  }
}

TEST_F(TensorParallelTest, BytesPerStepEqualSeed003Formula) {
  // 4 L allreduces of B T d floats per step (two in forward, two in backward per block), each
  // 2 (P-1)/P x 4 B T d bytes sent per rank by the ring (B T d divisible by P).
  for (const int p : {2, 4}) {
    Config c = gpt(4, 16, false);
    c.train.epochs = 1;
    const std::string run = dir("bytes");
    allreduce_training(c, p, run);
    const auto parallel = summary_of(run).at("parallel");
    const double b = 16, t = 8, d = 16, layers = 2;
    const double formula = 4 * layers * 2.0 * (p - 1) / p * 4 * b * t * d;
    EXPECT_EQ(parallel.at("strategy"), "tensor_parallel");
    EXPECT_DOUBLE_EQ(parallel.at("collectives_per_step").get<double>(), 4 * layers);
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank_predicted").get<double>(), formula);
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank").get<double>(), formula) << p;
    for (const auto& row : parallel.at("per_tensor_parallel_rank")) {
      EXPECT_DOUBLE_EQ(row.at("step_bytes_sent").get<double>(), 4 * formula);  // 4 steps
    }
    // Parameters per rank: V d + block d + 2 d + L (12 d^2 / P + 7 d / P + 6 d), V = 256.
    const double per_rank = 256 * d + 8 * d + 2 * d + layers * (12 * d * d / p + 7 * d / p + 6 * d);
    EXPECT_DOUBLE_EQ(parallel.at("parameters_per_rank").get<double>(), per_rank) << p;
  }
}

TEST_F(TensorParallelTest, ResumeEqualsTheUninterruptedRun) {
  const Config c = gpt(4, 16, true);
  const std::vector<float> uninterrupted = allreduce_training(c, 2);
  const std::string run = dir("resumed");
  Config first = c;
  first.train.epochs = 1;
  allreduce_training(first, 2, run);
  // The checkpoint holds one worker's layout (parameters and AdamW's moments gathered), so the
  // same split resumes bitwise where the uninterrupted run ends ...
  EXPECT_EQ(allreduce_training(c, 2, run, /*resume=*/true), uninterrupted);
  // ... and another split (or one worker) resumes it too, to rounding.
  const std::string again = dir("resplit");
  allreduce_training(first, 2, again);
  EXPECT_LE(relative_difference(allreduce_training(c, 4, again, /*resume=*/true), uninterrupted),
            1e-5);
}

TEST_F(TensorParallelTest, HeadsNotDivisibleByRanksIsOneConfigErrorNamingTheNumbers) {
  const Config c = gpt(4, 16, false);
  const std::string run = dir("uneven");
  try {
    allreduce_training(c, 3, run);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("model.heads = 4"), std::string::npos) << what;
    EXPECT_NE(what.find("3 ranks"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
  // Nothing trained: no metrics were written.
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(run) / "metrics.jsonl"));
}

TEST_F(TensorParallelTest, MlpAllGatherFormFollowsOneWorkerWithSeed003Bytes) {
  // Flatten 16 -> fc1 16 -> fc2 8 -> fc3 4 (mlp_config), each Linear's outputs split over P,
  // activations all-gathered, their gradients all-reduced (none for fc1), 20 steps of 24.
  Config c = mlp_config();
  c.train.epochs = 2;
  c.parallel.strategy = "tensor_parallel";
  c.parallel.allreduce = "ring";
  const std::vector<float> reference = one_worker(c);
  for (const int p : {2, 4}) {
    const std::string run = dir("mlp");
    const std::vector<float> params = allreduce_training(c, p, run);
    const double relative = relative_difference(params, reference);
    std::fprintf(stderr, "tensor_parallel allgather mlp p=%d: relative %.3g\n", p, relative);
    EXPECT_LE(relative, 1e-5) << p;
    // sum_i (P-1)/P 4 B d_i over d = 16, 8, 4, plus sum_{i>=2} 2 (P-1)/P 4 B d_{i-1} over 16, 8.
    const double share = (p - 1.0) / p, b = 24;
    const double formula = share * 4 * b * (16 + 8 + 4) + 2 * share * 4 * b * (16 + 8);
    const auto parallel = summary_of(run).at("parallel");
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank").get<double>(), formula) << p;
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank_predicted").get<double>(), formula);
    EXPECT_DOUBLE_EQ(parallel.at("collectives_per_step").get<double>(), 3 + 2);
  }
}

TEST_F(TensorParallelTest, UnsplittableModelsAndStylesAreRefused) {
  Config c = mlp_config();
  c.parallel.strategy = "tensor_parallel";
  c.model.hidden = {16, 6};  // 6 outputs over 4 ranks
  try {
    allreduce_training(c, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("fc2 has 6 outputs (model.hidden)"), std::string::npos)
        << e.what();
  }
  c.model.hidden = {16, 8};
  c.model.name = "lenet5";  // no tensor-parallel form: refused by the strategy
  c.data.synthetic_shape = {1, 28, 28};
  EXPECT_THROW(allreduce_training(c, 2), ConfigError);
  Config g = gpt(4, 16, false);
  g.tensor_parallel.style = "allgather";
  EXPECT_THROW(allreduce_training(g, 2), ConfigError);
}

}  // namespace
}  // namespace dtrain::train
