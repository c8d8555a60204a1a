// The pipeline strategy (strategies/pipeline/): p stages with m micro-batches train the trajectory
// of one worker with train.accumulate_steps = m (bitwise for the MLP; to rounding for the GPT,
// whose tied embedding gradient is summed across two stages), with both schedules, even and
// uneven cuts; a resumed run equals the uninterrupted one; bad settings are one-line errors.
// PipeDream (asynchronous, weight stashing) equals a sequential twin of its weight-version rule,
// bitwise (MLP, and the GPT with its tied head); deferred batch norm keeps the parameters of
// accumulation and takes the mini-batch's statistics.
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
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_partition.h"
#include "dtrain/optim/optimizer.h"
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

  // PipeDream's math done sequentially on one rank with the plain model: micro-batch n of the run
  // (step t = n / m, part k = n mod m of its batch) is forwarded and backwarded stage by stage,
  // stage s with its parameters after v_s(n) = max(D, n - lag_s) updates, lag_s = p - 1 - s (or
  // `lags` when given), D the micro-batches before the epoch began (the pipeline drains at each
  // epoch's end); a tied parameter read again by the last stage is read there at its owner's
  // version max(D, t m - (p - 1)) (the value at the end of the owner's previous step), and its
  // gradient is the owner's part plus the last stage's. Then every stage's newest parameters take
  // one optimizer step with that gradient (the micro-batch's mean loss) at the step's learning
  // rate. One optimizer over the whole model: the rules here are per element, so that is each
  // stage's own optimizer. `tied_as_owner`: the borrower reads the tied parameter at the owner's
  // own version of the micro-batch instead (a wrong rule, to show the test tells them apart).
  std::vector<float> pipedream_twin(Config config, int p, std::vector<int> lags = {},
                                    bool tied_as_owner = false) {
    const auto m = static_cast<int>(config.pipeline.micro_batches);
    config.parallel.strategy = "data_parallel";
    config.parallel.workers = 1;
    config.pipeline = PipelineSection{};
    Trainer trainer(config, TrainerOptions{dir("twin"), false, true, stderr, nullptr, nullptr});
    nn::Model& model = trainer.model();
    nn::ParamStore& store = model.store();
    const std::vector<nn::LayerRange> stages = nn::partition_by_count(model.layers().size(), p);
    if (lags.empty()) {
      for (int s = 0; s < p; ++s) lags.push_back(p - 1 - s);
    }
    const auto stage_of_layer = [&](std::size_t layer) {
      for (int s = 0; s < p; ++s) {
        const auto& r = stages[static_cast<std::size_t>(s)];
        if (layer >= r.begin && layer < r.end) return s;
      }
      return -1;
    };
    // Each parameter's stage; the tied entries borrowed by another stage.
    std::vector<int> stage_of(static_cast<std::size_t>(store.num_params()));
    std::vector<optim::Segment> segments;
    for (std::size_t e = 0; e < store.param_entries().size(); ++e) {
      const auto& entry = store.param_entries()[e];
      segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
      std::fill_n(stage_of.begin() + entry.offset, entry.numel,
                  stage_of_layer(model.param_layer()[e]));
    }
    struct Borrowed {
      const nn::ParamEntry* entry;
      int user;
    };
    std::vector<Borrowed> borrowed;
    for (std::size_t layer = 0; layer < model.layers().size(); ++layer) {
      for (const std::string& name : model.layers()[layer]->borrowed_params()) {
        const int e = store.find_param(name);
        const int owner = stage_of_layer(model.param_layer()[static_cast<std::size_t>(e)]);
        const int user = stage_of_layer(layer);
        if (owner != user) {
          borrowed.push_back({&store.param_entries()[static_cast<std::size_t>(e)], user});
        }
      }
    }
    auto optimizer = optim::make_optimizer(optimizer_config(config.optim), segments);
    const auto n_params = static_cast<std::size_t>(store.num_params());
    std::vector<std::vector<float>> versions{{store.params(), store.params() + n_params}};
    const data::Dataset& train = trainer.train_data();
    const std::int64_t n = train.size();
    const std::int64_t batch = config.train.batch_size;
    data::ShuffledSampler sampler(n, static_cast<std::uint64_t>(config.train.seed));
    tensor::Tensor x, dlogits;
    std::vector<std::int32_t> y;
    std::vector<std::vector<float>> head_parts(borrowed.size());
    std::int64_t step = 0;
    for (std::int64_t epoch = 0; epoch < config.train.epochs; ++epoch) {
      const std::vector<std::int64_t> order = sampler.epoch_order(epoch);
      const auto drained = static_cast<std::int64_t>(versions.size()) - 1;
      for (std::int64_t begin = 0; begin + m <= n; begin += batch, ++step) {
        const std::int64_t count = std::min(batch, n - begin);
        data::gather_batch(train,
                           std::span(order).subspan(static_cast<std::size_t>(begin),
                                                    static_cast<std::size_t>(count)),
                           x, y);
        const auto per_sample = static_cast<std::int64_t>(y.size()) / count;
        const std::int64_t tied_version = std::max(drained, step * m - (p - 1));
        for (int k = 0; k < m; ++k) {
          const std::int64_t number = step * m + k;
          const std::int64_t lo = count * k / m, hi = count * (k + 1) / m;
          float* params = store.params();
          // Stage s's view of the parameters: its own at v_s(n), a borrowed one at the owner's
          // version of the last step's end.
          const auto set_stage = [&](int s) {
            const std::int64_t v = std::max(drained, number - lags[static_cast<std::size_t>(s)]);
            for (std::size_t i = 0; i < n_params; ++i) {
              if (stage_of[i] == s) params[i] = versions[static_cast<std::size_t>(v)][i];
            }
            for (const Borrowed& b : borrowed) {
              if (b.user != s) continue;
              const std::int64_t owner_version = std::max(drained, number - lags[0]);
              const auto& from =
                  versions[static_cast<std::size_t>(tied_as_owner ? owner_version : tied_version)];
              std::copy_n(from.begin() + b.entry->offset, b.entry->numel, params + b.entry->offset);
            }
          };
          const nn::ForwardContext ctx{nn::Mode::kTrain,
                                       static_cast<std::uint64_t>(config.train.seed), number, 0};
          const tensor::Tensor micro = x.slice(lo, hi);
          const tensor::Tensor* h = &micro;
          for (int s = 0; s < p; ++s) {
            set_stage(s);
            h = &model.forward_range(*h, ctx, stages[static_cast<std::size_t>(s)]);
          }
          nn::softmax_cross_entropy(
              *h,
              std::span(y).subspan(static_cast<std::size_t>(lo * per_sample),
                                   static_cast<std::size_t>((hi - lo) * per_sample)),
              &dlogits);
          store.zero_grads();
          const tensor::Tensor* dy = &dlogits;
          for (int s = p - 1; s >= 0; --s) {
            set_stage(s);
            dy = &model.backward_range(*dy, stages[static_cast<std::size_t>(s)], 0, s > 0);
            for (std::size_t b = 0; b < borrowed.size(); ++b) {
              if (borrowed[b].user != s) continue;
              float* g = store.grads() + borrowed[b].entry->offset;
              head_parts[b].assign(g, g + borrowed[b].entry->numel);
              std::fill_n(g, borrowed[b].entry->numel, 0.0f);
            }
          }
          for (std::size_t b = 0; b < borrowed.size(); ++b) {
            float* g = store.grads() + borrowed[b].entry->offset;
            for (std::size_t i = 0; i < head_parts[b].size(); ++i) g[i] += head_parts[b][i];
          }
          std::copy(versions.back().begin(), versions.back().end(), params);
          optimizer->step(params, store.grads(), config.optim.lr);
          versions.emplace_back(params, params + n_params);
        }
      }
    }
    return versions.back();
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

TEST_F(PipelineTest, PipeDreamFollowsTheWeightVersionRuleOfASequentialTwin) {
  // 2 epochs of 10 steps, so the stale versions cross step and epoch boundaries; uneven m = 3
  // (batches of 8 + 8 + 8) and m = 4; p = 2, 3 (cuts 3/3 and 2/2/2); SGD with momentum and Adam.
  struct Case {
    int p, m;
    const char* optimizer;
  };
  for (const Case& t : {Case{2, 4, "sgd"}, Case{3, 3, "sgd"}, Case{3, 4, "adam"}}) {
    Config c = mlp(t.m, "pipedream");
    if (std::string(t.optimizer) == "adam") {
      c.optim.name = "adam";
      c.optim.momentum = 0.0;
      c.optim.lr = 0.01;
    }
    const std::vector<float> params = allreduce_training(c, t.p);
    const std::vector<float> twin = pipedream_twin(c, t.p);
    EXPECT_EQ(params, twin) << t.optimizer << " p=" << t.p << " m=" << t.m << ": max |diff| "
                            << max_diff(params, twin);
    // The staleness matters: the same twin without it (every stage's newest weights) and the
    // flush schedule both end elsewhere.
    const std::vector<float> fresh = pipedream_twin(c, t.p, std::vector<int>(t.p, 0));
    EXPECT_GT(max_diff(params, fresh), 1e-4f) << "p=" << t.p;
    c.pipeline.schedule = "1f1b";
    EXPECT_GT(max_diff(params, accumulating(c)), 1e-4f) << "p=" << t.p;
  }
}

TEST_F(PipelineTest, PipeDreamResumeEqualsTheUninterruptedRun) {
  // Every epoch ends with a drain, so the checkpoint holds a consistent model (nothing in flight)
  // and a resumed run starts its warm-up where the uninterrupted one did after its drain.
  Config c = mlp(4, "pipedream");
  c.optim.name = "adam";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.01;
  const std::vector<float> uninterrupted = allreduce_training(c, 3);
  const std::string run = dir("resumed");
  Config first = c;
  first.train.epochs = 1;
  allreduce_training(first, 3, run);
  EXPECT_EQ(allreduce_training(c, 3, run, /*resume=*/true), uninterrupted);
}

TEST_F(PipelineTest, PipeDreamSummaryReportsNoFlushBubbleAndStashes) {
  Config c = mlp(4, "pipedream");
  c.train.epochs = 1;
  const std::string run = dir("pipedream-summary");
  allreduce_training(c, 3, run);
  std::ifstream in(std::filesystem::path(run) / "summary.json");
  const auto summary = nlohmann::json::parse(in);
  const auto& parallel = summary.at("parallel");
  EXPECT_EQ(parallel.at("schedule"), "pipedream");
  EXPECT_EQ(parallel.at("bubble_predicted").get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(parallel.at("flush_bubble").get<double>(), 2.0 / 6.0);
  EXPECT_GE(parallel.at("pipedream_drains").get<double>(), 1.0);
  ASSERT_EQ(parallel.at("per_stage").size(), 3u);
  for (int s = 0; s < 3; ++s) {
    const auto& stage = parallel.at("per_stage")[static_cast<std::size_t>(s)];
    EXPECT_EQ(stage.at("peak_micro_batches_in_flight").get<double>(), 3.0 - s);  // p - s
    // A stashed copy of the stage's parameters per slot, none on the last stage.
    EXPECT_EQ(stage.at("peak_stash_bytes").get<double>(),
              s + 1 < 3 ? stage.at("parameters").get<double>() * 4.0 * (3 - s) : 0.0);
  }
}

TEST_F(PipelineTest, PipeDreamGptWithTiedEmbeddingFollowsTheTwin) {
  // The head on the last stage reads the embedding (owned by stage 0) at the owner's version of
  // the last step's end; the embedding's update adds the head's gradient part. p = 2, 3; SGD with
  // momentum, 2 epochs of 4 steps.
  for (int p : {2, 3}) {
    Config c = gpt(4, "pipedream");
    c.optim.lr = 0.01;
    const std::vector<float> params = allreduce_training(c, p);
    const std::vector<float> twin = pipedream_twin(c, p);
    const float worst = max_diff(params, twin);
    std::fprintf(stderr, "gpt pipedream p=%d: max |diff| against the twin %.3g\n", p,
                 static_cast<double>(worst));
    EXPECT_EQ(params, twin) << "p=" << p << ": max |diff| " << worst;
    EXPECT_GT(max_diff(params, pipedream_twin(c, p, {}, /*tied_as_owner=*/true)), 1e-6f);
  }
}

TEST_F(PipelineTest, PipeDreamCountsTheTiedCopiesOfTheGpt) {
  // The last stage keeps each micro-batch's part of the tied gradient (V x d) until stage 0 surely
  // took it, stage 0 its receive buffer and the value it sends; middle stages and untied models
  // hold none.
  Config c = gpt(4, "pipedream");
  c.train.epochs = 1;
  const std::string run = dir("pipedream-tied-copies");
  allreduce_training(c, 3, run);
  std::ifstream in(std::filesystem::path(run) / "summary.json");
  const auto stages = nlohmann::json::parse(in).at("parallel").at("per_stage");
  const double tied = 256.0 * 16.0 * 4.0;  // bytes of V x d floats (V = 256 bytes, d = 16)
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0].at("peak_tied_copy_bytes").get<double>(), 2.0 * tied);
  EXPECT_EQ(stages[1].at("peak_tied_copy_bytes").get<double>(), 0.0);
  EXPECT_GE(stages[2].at("peak_tied_copy_bytes").get<double>(), 2.0 * tied);
  Config m = mlp(4, "pipedream");
  m.train.epochs = 1;
  const std::string untied = dir("pipedream-untied");
  allreduce_training(m, 2, untied);
  std::ifstream in2(std::filesystem::path(untied) / "summary.json");
  const nlohmann::json untied_summary = nlohmann::json::parse(in2);
  for (const auto& stage : untied_summary.at("parallel").at("per_stage")) {
    EXPECT_EQ(stage.at("peak_tied_copy_bytes").get<double>(), 0.0);
  }
}

TEST_F(PipelineTest, PipeDreamRefusesTheHybridGrid) {
  Config h = mlp(4, "pipedream");
  h.parallel.strategy = "hybrid";
  h.hybrid.dp = 2;
  h.hybrid.pp = 2;
  h.parallel.workers = 4;
  try {
    validate(h);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hybrid.dp = 2"), std::string::npos) << e.what();
  }
}

TEST_F(PipelineTest, DeferredBatchNormKeepsTheUpdateAndTakesMiniBatchStatistics) {
  // A ResNet on 24 samples (one step of 24 per epoch), 3 stages, m = 4, deferred batch norm:
  // - parameters: bitwise one worker with accumulate_steps = 4 (normalization is per micro-batch
  //   either way; only the running statistics change);
  // - running statistics of the first batch norm layer after one step: one worker without
  //   micro-batches on the whole batch of 24 (its input is the same there: nothing before it
  //   depends on the normalization), to 1e-6; deeper layers see inputs normalized per micro-batch
  //   and so differ from that run (they are the same update from all micro-batches' statistics);
  // - the running statistics are not the non-deferred pipeline's (momentum once, not 4 times).
  Config c = mlp(4, "1f1b");
  c.model.name = "resnet";
  c.model.resnet_width = 4;
  c.train.epochs = 1;
  c.data.synthetic_samples = 24;
  c.data.synthetic_shape = {1, 8, 8};
  c.train.checkpoint_every = 0;
  auto run_pipeline = [&](const Config& config, std::vector<float>* buffers) {
    Config p = config;
    p.parallel.workers = 3;
    const std::string run = dir("deferred");
    std::vector<std::vector<float>> got(3), params(3);
    comm::spawn_ranks(
        3,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions options{run, false, true, stderr, nullptr, nullptr};
          options.comm = &comm;
          Trainer trainer(p, options);
          trainer.run();
          const auto& store = trainer.model().store();
          const auto r = static_cast<std::size_t>(comm.rank());
          got[r].assign(store.buffers(), store.buffers() + store.num_buffer_elements());
          params[r].assign(store.params(), store.params() + store.num_params());
        },
        comm_options());
    for (int r = 1; r < 3; ++r) EXPECT_EQ(got[static_cast<std::size_t>(r)], got[0]);
    *buffers = got[0];
    return params[0];
  };
  auto single = [&](std::int64_t accumulate, std::vector<float>* buffers) {
    Config one = c;
    one.parallel.strategy = "data_parallel";
    one.train.accumulate_steps = accumulate;
    one.pipeline = PipelineSection{};
    Trainer trainer(one, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    buffers->assign(store.buffers(), store.buffers() + store.num_buffer_elements());
    return std::vector<float>(store.params(), store.params() + store.num_params());
  };
  std::vector<float> plain_buffers, deferred_buffers, accumulate_buffers, whole_buffers;
  const std::vector<float> plain = run_pipeline(c, &plain_buffers);
  c.pipeline.deferred_batch_norm = true;
  const std::vector<float> deferred = run_pipeline(c, &deferred_buffers);
  const std::vector<float> accumulated = single(4, &accumulate_buffers);
  single(1, &whole_buffers);
  EXPECT_EQ(deferred, accumulated);
  EXPECT_EQ(plain, accumulated);
  EXPECT_EQ(plain_buffers, accumulate_buffers);
  // The first batch norm's running mean and variance: the first two buffer entries.
  Config probe = c;
  probe.parallel.strategy = "data_parallel";
  probe.pipeline = PipelineSection{};
  Trainer shape(probe, TrainerOptions{dir("probe"), false, true, stderr, nullptr, nullptr});
  const auto& entries = shape.model().store().buffer_entries();
  ASSERT_GE(entries.size(), 2u);
  ASSERT_NE(entries[0].name.find("running_mean"), std::string::npos) << entries[0].name;
  ASSERT_NE(entries[1].name.find("running_var"), std::string::npos) << entries[1].name;
  const auto first_end = static_cast<std::size_t>(entries[1].offset + entries[1].numel);
  float worst = 0.0f, moved = 0.0f;
  for (std::size_t i = 0; i < first_end; ++i) {
    worst = std::max(worst, std::abs(deferred_buffers[i] - whole_buffers[i]));
    moved = std::max(moved, std::abs(plain_buffers[i] - whole_buffers[i]));
  }
  EXPECT_LE(worst, 1e-6f);
  EXPECT_GT(moved, 1e-4f);  // the non-deferred pipeline is elsewhere: the test can tell them apart
  EXPECT_NE(deferred_buffers, plain_buffers);
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
