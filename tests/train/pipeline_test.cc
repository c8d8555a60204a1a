// The pipeline strategy (strategies/pipeline/): p stages with m micro-batches train the trajectory
// of one worker with train.accumulate_steps = m (bitwise for the MLP; to rounding for the GPT,
// whose tied embedding gradient is summed across two stages), with both schedules, even and
// uneven cuts; a resumed run equals the uninterrupted one; bad settings are one-line errors.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

class PipelineTest : public testing::ParallelTrainingTest {
 public:
  static Config mlp(int micro_batches, const char* schedule) {
    Config c = mlp_config();
    c.train.epochs = 2;
    c.parallel.strategy = "pipeline";
    c.pipeline.micro_batches = micro_batches;
    c.pipeline.schedule = schedule;
    c.train.checkpoint_every = 1;
    return c;
  }

  // small_gpt_config's GPT, 2 heads of width 16.
  Config gpt(int micro_batches, const char* schedule) {
    Config c = small_gpt_config("pipeline", 2, 16);
    c.train.seed = 5;
    c.train.checkpoint_every = 0;
    c.parallel.strategy = "pipeline";
    c.pipeline.micro_batches = micro_batches;
    c.pipeline.schedule = schedule;
    return c;
  }

  // One worker with train.accumulate_steps = m: what the pipeline should equal.
  std::vector<float> accumulating(Config config) {
    config.parallel.strategy = "data_parallel";
    config.train.accumulate_steps = config.pipeline.micro_batches;
    config.pipeline = PipelineSection{};
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  static float max_diff(const std::vector<float>& a, const std::vector<float>& b) {
    EXPECT_EQ(a.size(), b.size());
    float worst = 0.0f;
    for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
      worst = std::max(worst, std::abs(a[i] - b[i]));
    }
    return worst;
  }
};

TEST_F(PipelineTest, MlpEqualsOneWorkerAccumulatingBitwise) {
  // 6 layers (flatten fc1 act1 fc2 act2 fc3): 3 + 3, 2 + 2 + 2, 2 + 2 + 1 + 1 (uneven). m = 5 cuts
  // the batch of 24 unevenly too (4, 5, 5, 5, 5).
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (int m : {1, 4, 5}) {
      const std::vector<float> reference = accumulating(mlp(m, schedule));
      for (int p : {2, 3, 4}) {
        const std::vector<float> params = allreduce_training(mlp(m, schedule), p);
        EXPECT_EQ(params, reference) << schedule << " p=" << p << " m=" << m << ": max |diff| "
                                     << max_diff(params, reference);
      }
    }
  }
}

TEST_F(PipelineTest, BalancedPartitionTrainsTheSameTrajectory) {
  Config c = mlp(4, "1f1b");
  const std::vector<float> reference = accumulating(c);
  c.pipeline.partition = "balanced";
  EXPECT_EQ(allreduce_training(c, 3), reference);
}

TEST_F(PipelineTest, GptEqualsOneWorkerAccumulatingToRounding) {
  // embed block1 block2 ln_f head: the head on the last stage borrows the embedding's weight, whose
  // gradient is then summed in another order (stage 0's part + the last stage's): rounding only.
  // SGD with momentum passes that rounding through as it is (1e-6); AdamW divides by sqrt(v) and
  // so magnifies it where a gradient is near zero (1e-5, the relative bar).
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (const bool adamw : {false, true}) {
      const int m = 4;
      Config c = gpt(m, schedule);
      if (adamw) {
        c.optim.name = "adamw";
        c.optim.momentum = 0.0;
        c.optim.lr = 0.003;
        c.optim.weight_decay = 0.1;
      }
      const std::vector<float> reference = accumulating(c);
      for (int p : {2, 3, 4}) {
        const std::vector<float> params = allreduce_training(c, p);
        const float worst = max_diff(params, reference);
        std::fprintf(stderr, "gpt %s %s p=%d m=%d: max |diff| %.3g, relative %.3g\n", schedule,
                     adamw ? "adamw" : "sgd", p, m, static_cast<double>(worst),
                     relative_difference(params, reference));
        EXPECT_LE(worst, adamw ? 1e-5f : 1e-6f) << schedule << " p=" << p;
      }
    }
  }
}

TEST_F(PipelineTest, ResumeEqualsTheUninterruptedRun) {
  for (const char* schedule : {"gpipe", "1f1b"}) {
    Config c = mlp(3, schedule);
    c.optim.name = "adam";
    c.optim.momentum = 0.0;
    c.optim.lr = 0.01;
    c.train.epochs = 2;
    const std::vector<float> uninterrupted = allreduce_training(c, 3);
    const std::string run = dir("resumed");
    Config first = c;
    first.train.epochs = 1;
    allreduce_training(first, 3, run);
    const std::vector<float> resumed = allreduce_training(c, 3, run, /*resume=*/true);
    EXPECT_EQ(resumed, uninterrupted) << schedule;
  }
  // The checkpoint holds one worker's layout: it resumes under another stage count too.
  Config c = mlp(3, "1f1b");
  const std::string run = dir("restaged");
  Config first = c;
  first.train.epochs = 1;
  allreduce_training(first, 2, run);
  const std::vector<float> restaged = allreduce_training(c, 3, run, /*resume=*/true);
  EXPECT_EQ(restaged, allreduce_training(c, 2));
}

TEST_F(PipelineTest, BatchNormRunningStatisticsEqualOneWorkerAccumulating) {
  // A ResNet (batch norm in each block): normalization per micro-batch and running statistics
  // updated once per micro-batch in order, on the stage holding the layer, as one worker with
  // accumulate_steps = m does. The buffers (gathered to every rank) equal that run's, bitwise,
  // and so does the evaluation.
  Config c = mlp(4, "1f1b");
  c.model.name = "resnet";
  c.model.resnet_width = 4;
  c.train.epochs = 1;
  c.data.synthetic_shape = {1, 8, 8};
  Config single = c;
  single.parallel.strategy = "data_parallel";
  single.train.accumulate_steps = 4;
  single.pipeline = PipelineSection{};
  Trainer reference(single, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
  const RunSummary expected = reference.run();
  const auto& rs = reference.model().store();
  const std::vector<float> buffers(rs.buffers(), rs.buffers() + rs.num_buffer_elements());
  const std::vector<float> params(rs.params(), rs.params() + rs.num_params());
  ASSERT_GT(buffers.size(), 0u);
  const std::string run = dir("pipeline");
  c.parallel.workers = 3;
  std::vector<std::vector<float>> got_buffers(3), got_params(3);
  std::vector<double> accuracy(3);
  comm::spawn_ranks(
      3,
      [&](comm::Communicator& comm) {
        ScopedComputePool pool(1);
        TrainerOptions options{run, false, true, stderr, nullptr, nullptr};
        options.comm = &comm;
        Trainer trainer(c, options);
        const RunSummary summary = trainer.run();
        const auto& store = trainer.model().store();
        const auto r = static_cast<std::size_t>(comm.rank());
        got_buffers[r].assign(store.buffers(), store.buffers() + store.num_buffer_elements());
        got_params[r].assign(store.params(), store.params() + store.num_params());
        accuracy[r] = summary.final_test_accuracy;
      },
      comm_options());
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got_buffers[static_cast<std::size_t>(r)], buffers) << "rank " << r;
    EXPECT_EQ(got_params[static_cast<std::size_t>(r)], params) << "rank " << r;
    EXPECT_EQ(accuracy[static_cast<std::size_t>(r)], expected.final_test_accuracy);
  }
}

TEST_F(PipelineTest, SummaryReportsTheBubbleBesideTheFormula) {
  Config c = mlp(4, "gpipe");
  c.train.epochs = 1;
  const std::string run = dir("summary");
  allreduce_training(c, 2, run);
  std::ifstream in(std::filesystem::path(run) / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  const auto& parallel = summary.at("parallel");
  EXPECT_EQ(parallel.at("strategy"), "pipeline");
  EXPECT_DOUBLE_EQ(parallel.at("bubble_predicted").get<double>(), 1.0 / 5.0);
  const double measured = parallel.at("bubble_measured").get<double>();
  EXPECT_GT(measured, 0.0);
  EXPECT_LT(measured, 1.0);
  ASSERT_EQ(parallel.at("per_stage").size(), 2u);
  for (const auto& stage : parallel.at("per_stage")) {
    EXPECT_EQ(stage.at("peak_micro_batches_in_flight").get<double>(), 4.0);  // GPipe: m
    EXPECT_GT(stage.at("peak_activation_bytes").get<double>(), 0.0);
  }
}

TEST_F(PipelineTest, MoreStagesThanLayersIsAConfigErrorNamingBoth) {
  Config c = mlp(2, "1f1b");
  c.model.hidden = {};  // flatten fc: 2 layers
  try {
    allreduce_training(c, 3);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 layers"), std::string::npos) << what;
    EXPECT_NE(what.find("3 pipeline stages"), std::string::npos) << what;
  }
}

TEST_F(PipelineTest, AccumulationAndTooManyMicroBatchesAreRefused) {
  Config c = mlp(4, "1f1b");
  c.train.accumulate_steps = 2;
  EXPECT_THROW(validate(c), ConfigError);
  c.train.accumulate_steps = 1;
  c.pipeline.micro_batches = 25;  // batch 24
  EXPECT_THROW(validate(c), ConfigError);
  c.pipeline.micro_batches = 4;
  c.pipeline.schedule = "zero-bubble";
  EXPECT_THROW(validate(c), ConfigError);
}

}  // namespace
}  // namespace dtrain::train
