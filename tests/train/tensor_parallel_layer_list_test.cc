// Layer lists (model.name = "layers") under tensor parallelism (nn/layer_list_tensor_parallel.h):
// the built-in MLP written as a list follows one worker with the built-in MLP's all-gather bytes
// (style auto) or Megatron's pair's (style megatron); the built-in GPT written as a list splits
// its blocks as the built-in GPT does, bitwise the same run, and blocks written as residual
// groups split alike; checkpoints resume bitwise on the
// same split and on one worker to rounding; the hybrid grid (tp 2 x pp 2) takes the list too; a
// layer that the ranks do not divide is one line naming it and the numbers.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train {
namespace {

nn::LayerSpec layer(const std::string& kind, const std::string& name,
                    std::map<std::string, nn::LayerParam> params = {}) {
  params["name"] = name;
  return nn::LayerSpec{kind, std::move(params), {}, {}};
}

class TensorParallelLayerListTest : public testing::ParallelTrainingTest {
 public:
  // mlp_config's MLP (flatten 16 -> fc1 16 -> fc2 8 -> fc3 4) as a layer list, under
  // tensor_parallel.
  static Config mlp_list(const std::string& style = "auto", std::int64_t fc2 = 8) {
    Config c = mlp_config();
    c.model.name = "layers";
    c.model.layers = {layer("flatten", "flatten"),
                      layer("linear", "fc1", {{"out_features", std::int64_t{16}}}),
                      layer("relu", "act1"),
                      layer("linear", "fc2", {{"out_features", fc2}}),
                      layer("relu", "act2"),
                      layer("linear", "fc3", {{"out_features", std::string("classes")}})};
    c.train.epochs = 2;
    c.parallel.strategy = "tensor_parallel";
    c.parallel.allreduce = "ring";
    c.tensor_parallel.style = style;
    return c;
  }

  std::vector<float> one_worker(Config config) {
    config.parallel.strategy = "data_parallel";
    config.hybrid = HybridSection{};
    config.pipeline = PipelineSection{};
    Trainer trainer(config, TrainerOptions{dir("single"), false, true, stderr, nullptr, nullptr});
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  static nlohmann::json parallel_summary(const std::string& run) {
    std::ifstream in(std::filesystem::path(run) / "summary.json");
    return nlohmann::json::parse(in).at("parallel");
  }

  // Trains `c` on 2 ranks; expects one worker's parameters within 1e-5 and the measured bytes
  // per step equal to the printed formula and to `bytes`.
  void expect_follows(const Config& c, double bytes, double collectives, const char* what) {
    const std::vector<float> reference = one_worker(c);
    const std::string run = dir("split");
    const double relative = relative_difference(allreduce_training(c, 2, run), reference);
    std::fprintf(stderr, "%s: relative difference to one worker %.3g\n", what, relative);
    EXPECT_LE(relative, 1e-5) << what;
    const auto parallel = parallel_summary(run);
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank").get<double>(), bytes) << what;
    EXPECT_DOUBLE_EQ(parallel.at("bytes_sent_per_step_per_rank_predicted").get<double>(), bytes);
    EXPECT_DOUBLE_EQ(parallel.at("collectives_per_step").get<double>(), collectives) << what;
  }
};

TEST_F(TensorParallelLayerListTest, MlpListFollowsOneWorkerWithTheBuiltInMlpsBytes) {
  // auto = all-gather, as the built-in MLP: sum_i (P-1)/P 4 B d_i over d = 16, 8, 4 plus
  // sum_{i>=2} 2 (P-1)/P 4 B d_{i-1} over 16, 8 (B = 24, P = 2): 3,648 bytes, 5 collectives.
  const double share = 0.5, b = 24;
  expect_follows(mlp_list(), share * 4 * b * (16 + 8 + 4) + 2 * share * 4 * b * (16 + 8), 5,
                 "layer-list mlp allgather p=2");
  // megatron: fc1 column-parallel (no input gradient: the first layer), fc2 row-parallel (one
  // allreduce of its B x 8 output), fc3 replicated: 2 (P-1)/P 4 B 8 = 768 bytes, 1 collective.
  expect_follows(mlp_list("megatron"), 2 * share * 4 * b * 8, 1, "layer-list mlp megatron p=2");
}

TEST_F(TensorParallelLayerListTest, GptListSplitsAsTheBuiltInGptBitwise) {
  Config builtin = small_gpt_config("tensor", 4, 16);
  builtin.train.seed = 3;
  builtin.parallel.allreduce = "ring";
  builtin.parallel.strategy = "tensor_parallel";
  Config list = builtin;
  list.model.name = "layers";
  nn::ModelSpec spec;
  spec.name = "gpt";
  spec.d_model = 16;
  spec.heads = 4;
  spec.layers = 2;
  spec.block = 8;
  list.model.layers = nn::gpt_layers(spec);  // embed, block1, block2, ln_f, head
  // 4 L x 2 (P-1)/P x 4 B T d at B = 16, T = 8, d = 16, L = 2, P = 2.
  expect_follows(list, 4 * 2 * 2 * 0.5 * 4 * 16 * 8 * 16, 8, "layer-list gpt p=2");
  EXPECT_EQ(allreduce_training(list, 2), allreduce_training(builtin, 2));
}

TEST_F(TensorParallelLayerListTest, PreNormBlocksOfResidualGroupsSplitAsTransformerBlocks) {
  // Each block written as two residual groups, x + attention(layer_norm(x)) and
  // h + linear(gelu(linear(layer_norm(h)))): the attention splits by heads and, under megatron,
  // the MLP's linears form a pair inside the group's body, so the bytes are a transformer
  // block's, 4 L x 2 (P-1)/P x 4 B T d with B = 16, T = 8, d = 16, L = 2, P = 2.
  const auto block = [](const std::string& name) {
    nn::LayerSpec attn = layer("residual", name + ".attn");
    attn.body = {layer("layer_norm", "ln"),
                 layer("attention", "core", {{"heads", std::int64_t{4}}})};
    nn::LayerSpec mlp = layer("residual", name + ".mlp");
    mlp.body = {layer("layer_norm", "ln"),
                layer("linear", "fc", {{"out_features", std::int64_t{64}}}), layer("gelu", "act"),
                layer("linear", "out", {{"out_features", std::int64_t{16}}})};
    return std::vector<nn::LayerSpec>{attn, mlp};
  };
  Config c = small_gpt_config("tensor", 4, 16);
  c.train.seed = 3;
  c.parallel.allreduce = "ring";
  c.parallel.strategy = "tensor_parallel";
  c.tensor_parallel.style = "megatron";
  c.model.name = "layers";
  c.model.layers = {layer("embedding", "embed", {{"dim", std::int64_t{16}}})};
  for (const char* name : {"b1", "b2"}) {
    for (nn::LayerSpec& group : block(name)) c.model.layers.push_back(std::move(group));
  }
  c.model.layers.push_back(layer("layer_norm", "ln_f"));
  c.model.layers.push_back(layer("tied_head", "head"));
  expect_follows(c, 4 * 2 * 2 * 0.5 * 4 * 16 * 8 * 16, 8, "residual-group blocks megatron p=2");
}

TEST_F(TensorParallelLayerListTest, ResumesBitwiseOnTheSameSplitAndOnOneWorker) {
  Config c = mlp_list("megatron");
  c.optim.name = "adam";
  c.optim.momentum = 0.0;
  c.optim.lr = 0.01;
  c.train.checkpoint_every = 1;
  const std::vector<float> uninterrupted = allreduce_training(c, 2);
  Config first = c;
  first.train.epochs = 1;
  const std::string run = dir("resumed");
  allreduce_training(first, 2, run);
  // The checkpoint holds one worker's layout (parameters and Adam's moments gathered).
  EXPECT_EQ(allreduce_training(c, 2, run, /*resume=*/true), uninterrupted);
  const std::string again = dir("one-worker");
  allreduce_training(first, 2, again);
  EXPECT_LE(relative_difference(allreduce_training(c, 1, again, /*resume=*/true), uninterrupted),
            1e-5);
}

TEST_F(TensorParallelLayerListTest, HybridTensorTimesPipelineTakesTheList) {
  // 2 stages of the list's 6 layers: flatten fc1 act1 | fc2 act2 fc3. Under megatron the cut falls
  // inside the pair, so each tensor rank's pipeline sends its own slice of fc1's hidden units.
  for (const char* style : {"auto", "megatron"}) {
    Config c = mlp_list(style);
    c.train.epochs = 1;
    c.parallel.strategy = "hybrid";
    c.hybrid.tp = 2;
    c.hybrid.pp = 2;
    c.pipeline.micro_batches = 2;
    const std::vector<float> reference = one_worker(c);
    const std::string run = dir("tp-pp");
    const double relative = relative_difference(allreduce_training(c, 4, run), reference);
    std::fprintf(stderr, "layer-list mlp %s tp 2 x pp 2: relative difference %.3g\n", style,
                 relative);
    EXPECT_LE(relative, 1e-5) << style;
    const auto parallel = parallel_summary(run);
    ASSERT_EQ(parallel.at("per_grid_rank").size(), 4u);
    for (const auto& row : parallel.at("per_grid_rank")) {
      EXPECT_GT(row.at("model_group_bytes_sent_per_step").get<double>(), 0.0);
      EXPECT_DOUBLE_EQ(row.at("model_group_bytes_sent_per_step").get<double>(),
                       row.at("model_group_bytes_predicted_per_step").get<double>())
          << style << " " << row.dump();
    }
  }
}

TEST_F(TensorParallelLayerListTest, LayersTheRanksDoNotDivideAreOneLineNamingThem) {
  const auto expect_refused = [&](const Config& c, int ranks, const std::string& wanted) {
    const std::string run = dir("refused");
    try {
      allreduce_training(c, ranks, run);
      ADD_FAILURE() << "no error for " << wanted;
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(wanted), std::string::npos) << what;
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    }
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(run) / "metrics.jsonl"));
  };
  expect_refused(mlp_list("auto", 6), 4,
                 "model.layer[3] (linear) 'fc2' has 6 outputs (out_features = 6), which cannot "
                 "be split over 4 ranks (6 % 4 = 2)");
  Config g = small_gpt_config("tensor", 4, 24);
  g.parallel.strategy = "tensor_parallel";
  g.model.name = "layers";
  nn::ModelSpec spec;
  spec.name = "gpt";
  spec.d_model = 24;
  spec.heads = 4;
  spec.layers = 1;
  spec.block = 8;
  g.model.layers = nn::gpt_layers(spec);
  expect_refused(g, 3, "model.layer[1] (transformer_block) 'block1' has heads = 4, which cannot");
  Config none = mlp_config();  // megatron with no linear pair: nothing would split
  none.model.name = "layers";
  none.model.layers = {layer("flatten", "flatten"),
                       layer("linear", "fc", {{"out_features", std::string("classes")}})};
  none.parallel.strategy = "tensor_parallel";
  none.tensor_parallel.style = "megatron";
  expect_refused(none, 2, "no layer of model.layer splits over 2 ranks");
}

}  // namespace
}  // namespace dtrain::train
