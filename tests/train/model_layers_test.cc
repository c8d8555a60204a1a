// Models described as [[model.layer]] tables (model.name = "layers", docs/MODELS.md): the shipped
// descriptions under examples/models/ are the zoo's four models bit for bit, the tables read back
// from resolved.toml, bad tables are refused with the layer named, and a layer list with a residual
// group trains under data parallelism, ZeRO-1, parameter servers and the pipeline.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/train/config.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/trainer.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

const std::string kModels = std::string(DTRAIN_TEST_DATA_DIR) + "/../../../examples/models/";

std::string config_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

struct Zoo {
  const char* file;
  const char* builtin;
  tensor::Shape sample;
  std::int64_t classes;
  std::int64_t parameters;                          // the built-in's, from its header comment
  nn::LayerList (*describe)(const nn::ModelSpec&);  // the builder's own list
};

// Each description against the zoo's builder with the same [model] keys: the builder's own layer
// list, and the same tensors (names, shapes, order), the same initial values from the same seed,
// the same forward output, bit for bit. (The resnet file writes its blocks as residual groups,
// the zoo uses nn::ResidualBlock: there the bits are what ties the two.)
TEST(ModelLayers, ShippedDescriptionsAreTheZooModelsBitForBit) {
  const Zoo zoo[] = {{"mlp.toml", "mlp", {1, 28, 28}, 10, 269322, nn::mlp_layers},
                     {"lenet5.toml", "lenet5", {1, 28, 28}, 10, 61706, nn::lenet5_layers},
                     {"resnet.toml", "resnet", {1, 28, 28}, 10, 77754, nn::resnet_layers},
                     {"gpt.toml", "gpt", {128}, 256, 842496, nn::gpt_layers}};
  for (const Zoo& z : zoo) {
    SCOPED_TRACE(z.file);
    const Config listed = load_config(kModels + z.file);
    ASSERT_EQ(listed.model.name, "layers");
    Config builtin = listed;
    builtin.model.name = z.builtin;
    builtin.model.layers.clear();
    const nn::ModelSpec builtin_spec = model_spec(builtin.model, z.sample, z.classes);
    // The zoo builds its models as lists too: the file is the builder's list, table for table,
    // except resnet's, whose blocks the file spells out as residual groups.
    if (std::string(z.builtin) != "resnet") {
      EXPECT_EQ(listed.model.layers, z.describe(builtin_spec));
    } else {
      EXPECT_EQ(z.describe(builtin_spec)[3].kind, "residual_block");
      EXPECT_EQ(listed.model.layers[3].kind, "residual");
    }
    auto a = nn::build_model(model_spec(listed.model, z.sample, z.classes));
    auto b = nn::build_model(builtin_spec);
    a->init(3);
    b->init(3);
    const nn::ParamStore& sa = a->store();
    const nn::ParamStore& sb = b->store();
    EXPECT_EQ(sa.num_params(), z.parameters);
    ASSERT_EQ(sa.num_params(), sb.num_params());
    ASSERT_EQ(sa.param_entries().size(), sb.param_entries().size());
    for (std::size_t i = 0; i < sa.param_entries().size(); ++i) {
      EXPECT_EQ(sa.param_entries()[i].name, sb.param_entries()[i].name);
      EXPECT_EQ(sa.param_entries()[i].shape, sb.param_entries()[i].shape);
    }
    EXPECT_EQ(std::vector<float>(sa.params(), sa.params() + sa.num_params()),
              std::vector<float>(sb.params(), sb.params() + sb.num_params()));
    // Two samples: images in [-1, 1], or byte ids.
    tensor::Shape shape{2};
    shape.insert(shape.end(), z.sample.begin(), z.sample.end());
    tensor::Tensor x = tensor::Tensor::empty(shape);
    Rng rng(5, 1);
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      x.data()[i] =
          z.classes == 256 ? static_cast<float>(rng.next_u32() % 256) : 2.0f * rng.uniform() - 1.0f;
    }
    const std::vector<float> ya = a->forward(x, nn::ForwardContext{}).to_vector();
    const std::vector<float> yb = b->forward(x, nn::ForwardContext{}).to_vector();
    EXPECT_EQ(ya, yb);
  }
}

TEST(ModelLayers, TablesReadBackFromResolvedToml) {
  for (const char* file : {"resnet.toml", "gpt.toml"}) {
    const Config config = load_config(kModels + file);
    const std::string text = to_toml(config);
    const Config again = parse_config(text, "resolved.toml");
    EXPECT_EQ(again.model.layers, config.model.layers) << text;
    EXPECT_EQ(again, config);
    EXPECT_EQ(to_toml(again), text);
  }
}

TEST(ModelLayers, BadTablesNameTheLayerAndWhatIsAccepted) {
  const std::string layer = "[model]\nname = \"layers\"\n[[model.layer]]\n";
  const auto error = [](const std::string& text, std::vector<std::string> sets = {}) {
    return config_error([&] { parse_config(text, "m.toml", sets); });
  };
  EXPECT_THAT(error(layer + "kind = \"dense\"\n"),
              HasSubstr("model.layer[0] in m.toml: unknown kind 'dense'; accepted kinds: linear"));
  EXPECT_THAT(error(layer + "kind = \"linear\"\nunits = 3\n"),
              HasSubstr("model.layer[0] (linear) in m.toml: unknown parameter 'units'; accepted "
                        "parameters of linear: name, out_features"));
  EXPECT_THAT(error(layer + "kind = \"linear\"\nout_features = [3]\n"),
              HasSubstr("parameter 'out_features' must be a number, a boolean or a string, got a "
                        "list"));
  EXPECT_THAT(error(layer + "kind = \"conv2d\"\nout_channels = 4\nkernel = 2.5\n"),
              HasSubstr("(conv2d) in m.toml: parameter 'kernel' must be an integer, got a float"));
  EXPECT_THAT(error("[model]\nname = \"layers\"\nlayer = 3\n"),
              HasSubstr("'model.layer' in m.toml must be a list of layer tables"));
  EXPECT_THAT(error("[model]\nname = \"layers\"\n"),
              HasSubstr("'model.name' = \"layers\" (m.toml) needs the layers: [[model.layer]]"));
  EXPECT_THAT(error("[[model.layer]]\nkind = \"relu\"\n"),
              HasSubstr("read only with model.name = \"layers\", but 'model.name' = \"mlp\""));
  EXPECT_THAT(error(layer + "kind = \"relu\"\n", {"model.layer=3"}),
              HasSubstr("'model.layer' cannot be set by --set model.layer=3"));
  EXPECT_THAT(error(layer + "kind = \"embedding\"\ndim = 8\n"),
              HasSubstr("first layer is an embedding reads data set \"text\""));
}

// 256 samples of (1, 6, 6) in 4 classes, global batch 32: 8 steps per epoch, 3 epochs.
Config small_layers_config() {
  Config c;
  c.data.dataset = "synthetic";
  c.data.synthetic_samples = 256;
  c.data.synthetic_test_samples = 64;
  c.data.synthetic_classes = 4;
  c.data.synthetic_shape = {1, 6, 6};
  c.data.synthetic_noise = 0.8;
  c.train.epochs = 3;
  c.train.batch_size = 32;
  c.train.seed = 7;
  c.train.log_every = 1;
  c.train.checkpoint_every = 0;
  c.optim.lr = 0.05;
  c.optim.momentum = 0.9;
  c.parallel.trace_steps = 0;
  c.model.name = "layers";
  // conv 3x3 to 4 channels, a residual group (conv, batch norm, relu) over it, pool, linear.
  c.model.layers = parse_config(R"(
[model]
name = "layers"
[[model.layer]]
kind = "conv2d"
out_channels = 4
kernel = 3
padding = 1
[[model.layer]]
kind = "residual"
activation = "relu"
[[model.layer.body]]
kind = "conv2d"
out_channels = 4
kernel = 3
padding = 1
[[model.layer.body]]
kind = "batch_norm"
[[model.layer]]
kind = "max_pool2d"
kernel = 2
[[model.layer]]
kind = "flatten"
[[model.layer]]
kind = "linear"
out_features = "classes"
)",
                                "small.toml")
                       .model.layers;
  return c;
}

std::vector<double> step_losses(const std::string& run_dir) {
  std::ifstream in(run_dir + "/metrics.jsonl");
  std::vector<double> out;
  std::string line;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line);
    if (record["kind"] == "step") out.push_back(record["loss"].get<double>());
  }
  return out;
}

TEST(ModelLayers, ALayerListTrainsOnTwoWorkersAsOnOne) {
  testing::TempDir tmp;
  Config config = small_layers_config();
  TrainerOptions options;
  options.quiet = true;
  options.run_dir = tmp.file("one");
  const RunSummary one = run_training(config, options);
  config.parallel.workers = 2;
  config.data_parallel.sync_batch_norm = true;  // batch statistics over the global batch
  options.run_dir = tmp.file("two");
  const RunSummary two = run_training(config, options);
  EXPECT_EQ(two.model, "layers");
  // conv 4 (9 + 1), group conv 4 (36 + 1) and batch norm 2 x 4, linear 4 (36 + 1).
  EXPECT_EQ(two.parameters, 40 + 148 + 8 + 148);
  // The two halves of each batch averaged, batch norm synchronized: one worker's trajectory (the
  // ring allreduce sums in another order, so not bitwise).
  EXPECT_NEAR(two.final_train_loss, one.final_train_loss, 1e-5 * one.final_train_loss);
  const std::vector<double> losses = step_losses(tmp.file("two"));
  ASSERT_EQ(losses.size(), 24u);
  EXPECT_LT(losses.back(), 0.5 * losses.front()) << fmt::format("{}", fmt::join(losses, " "));
  // The strategies that take a model of the zoo take a layer list unchanged; the pipeline cuts the
  // top-level list (the residual group is one layer of it).
  for (const std::string strategy : {"zero1", "parameter_server", "pipeline"}) {
    Config other = small_layers_config();
    other.parallel.workers = 2;
    if (strategy == "zero1") {
      other.data_parallel.zero_stage = "1";
    } else {
      other.parallel.strategy = strategy;
    }
    options.run_dir = tmp.file(strategy);
    const RunSummary summary = run_training(other, options);
    const std::vector<double> curve = step_losses(tmp.file(strategy));
    ASSERT_FALSE(curve.empty()) << strategy;
    EXPECT_LT(curve.back(), 0.6 * curve.front()) << strategy;
    EXPECT_EQ(summary.parameters, two.parameters) << strategy;
  }
}

}  // namespace
}  // namespace dtrain::train
