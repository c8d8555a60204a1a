// Layer lists (nn/layer_list.h) and residual groups (nn/residual_group.h): finite differences of a
// group, a group against nn::ResidualBlock bit for bit (parameters, output, gradients), sizes
// inferred from the data, the substitute seam (what a split build sees and replaces), and the
// one-line errors for every kind of bad list.
#include "dtrain/nn/layer_list.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/residual_group.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using testing::random_tensor;

LayerSpec layer(std::string kind, std::map<std::string, LayerParam> params = {},
                LayerList body = {}, LayerList shortcut = {}) {
  return LayerSpec{std::move(kind), std::move(params), std::move(body), std::move(shortcut)};
}

template <typename E>
std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error)";
}

std::string build_error(const LayerList& list, tensor::Shape sample = {1, 8, 8},
                        std::int64_t classes = 10) {
  try {
    build_layer_list(list, LayerListInput{std::move(sample), classes});
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;  // one line
    return what;
  }
  return "(no error)";
}

// A smooth group (no kinks, so finite differences hold everywhere): tanh(body(x) + shortcut(x)).
TEST(ResidualGroup, FiniteDifferencesIdentityAndProjection) {
  for (const bool projection : {false, true}) {
    std::vector<std::unique_ptr<Layer>> body;
    body.push_back(std::make_unique<Linear>("g.fc1", 4, 5, InitKind::kXavier));
    body.push_back(std::make_unique<Activation>("g.tanh", ActivationKind::kTanh));
    body.push_back(std::make_unique<Linear>("g.fc2", 5, projection ? 3 : 4, InitKind::kXavier));
    std::vector<std::unique_ptr<Layer>> shortcut;
    if (projection) shortcut.push_back(std::make_unique<Linear>("g.proj", 4, 3));
    ResidualGroup group("g", std::move(body), std::move(shortcut),
                        std::make_unique<Activation>("g.act", ActivationKind::kTanh));
    EXPECT_EQ(group.output_shape({2, 4}), (tensor::Shape{2, projection ? 3 : 4}));
    ParamStore store;
    testing::bind_single_layer(group, store, 3);
    testing::GradCheckOptions options;
    options.step = 1e-3;
    testing::check_layer_gradients(group, store, random_tensor({3, 4}, 5), options);
  }
}

// kind = "residual" with the body and shortcut of a ResNet block is nn::ResidualBlock: the same
// parameters from the same seed, the same output and the same gradients, bit for bit.
TEST(LayerList, ResidualGroupIsTheResidualBlockBitForBit) {
  auto conv = [](std::int64_t out, std::int64_t kernel, std::int64_t stride, std::int64_t pad,
                 const char* name) {
    return layer("conv2d", {{"name", name},
                            {"out_channels", out},
                            {"kernel", kernel},
                            {"stride", stride},
                            {"padding", pad},
                            {"bias", false}});
  };
  auto bn = [](const char* name) { return layer("batch_norm", {{"name", name}}); };
  const LayerList head = {layer("global_avg_pool2d"), layer("flatten"),
                          layer("linear", {{"out_features", std::string("classes")}})};
  LayerList groups = {layer("residual", {{"activation", std::string("relu")}},
                            {conv(3, 3, 1, 1, "conv1"), bn("bn1"), layer("relu"),
                             conv(3, 3, 1, 1, "conv2"), bn("bn2")}),
                      layer("residual", {{"activation", std::string("relu")}},
                            {conv(5, 3, 2, 1, "conv1"), bn("bn1"), layer("relu"),
                             conv(5, 3, 1, 1, "conv2"), bn("bn2")},
                            {conv(5, 1, 2, 0, "shortcut_conv"), bn("shortcut_bn")})};
  LayerList blocks = {
      layer("residual_block", {{"out_channels", std::int64_t{3}}}),
      layer("residual_block", {{"out_channels", std::int64_t{5}}, {"stride", std::int64_t{2}}})};
  groups.insert(groups.end(), head.begin(), head.end());
  blocks.insert(blocks.end(), head.begin(), head.end());
  const LayerListInput input{{3, 9, 7}, 4};
  auto a = build_layer_list(groups, input);
  auto b = build_layer_list(blocks, input);
  a->init(11);
  b->init(11);
  ASSERT_EQ(a->store().num_params(), b->store().num_params());
  ASSERT_EQ(a->store().num_buffer_elements(), b->store().num_buffer_elements());
  for (std::size_t i = 0; i < a->store().param_entries().size(); ++i) {
    EXPECT_EQ(a->store().param_entries()[i].name, b->store().param_entries()[i].name);
  }
  const auto params = [](Model& m) {
    return std::vector<float>(m.store().params(), m.store().params() + m.store().num_params());
  };
  EXPECT_EQ(params(*a), params(*b));
  const tensor::Tensor x = random_tensor({4, 3, 9, 7}, 2);
  const std::vector<float> ya = a->forward(x, ForwardContext{}).to_vector();
  const std::vector<float> yb = b->forward(x, ForwardContext{}).to_vector();
  EXPECT_EQ(ya, yb);
  const tensor::Tensor dy = random_tensor({4, 4}, 3);
  a->store().zero_grads();
  b->store().zero_grads();
  a->backward(dy);
  b->backward(dy);
  const auto grads = [](Model& m) {
    return std::vector<float>(m.store().grads(), m.store().grads() + m.store().num_params());
  };
  EXPECT_EQ(grads(*a), grads(*b));
  EXPECT_EQ(std::vector<float>(a->store().buffers(),
                               a->store().buffers() + a->store().num_buffer_elements()),
            std::vector<float>(b->store().buffers(),
                               b->store().buffers() + b->store().num_buffer_elements()));
}

TEST(LayerList, SizesComeFromTheDataAndNamesFromThePlace) {
  const LayerList list = {
      layer("conv2d", {{"out_channels", std::int64_t{4}}, {"kernel", std::int64_t{3}}}),
      layer("relu"),
      layer("max_pool2d", {{"kernel", std::int64_t{2}}}),
      layer("flatten"),
      layer("dropout", {{"p", 0.25}}),
      layer("linear", {{"name", std::string("out")}, {"out_features", std::string("classes")}})};
  auto model = build_layer_list(list, LayerListInput{{2, 8, 8}, 7});
  // conv 3x3: 8 -> 6, pool 2: 6 -> 3, flatten 4 * 3 * 3 = 36 -> 7 classes.
  EXPECT_EQ(model->output_shape(5), (tensor::Shape{5, 7}));
  EXPECT_EQ(model->store().num_params(), 4 * (2 * 9 + 1) + 7 * (36 + 1));
  const auto& entries = model->store().param_entries();
  ASSERT_EQ(entries.size(), 4u);
  EXPECT_EQ(entries[0].name, "layer0.weight");
  EXPECT_EQ(entries[3].name, "out.bias");
}

TEST(LayerList, TheSubstituteSeesEveryLayerUnsplitAndItsTwinIsBuilt) {
  // The seam of layer_list_tensor_parallel.h: every layer, a group's too, is offered with its
  // place, name and one worker's input shape; a returned twin takes the layer's place.
  struct Recorder final : LayerSubstitute {
    std::vector<std::string> seen;
    const Layer* twin = nullptr;
    std::unique_ptr<Layer> substitute(const LayerSite& site, const Layer& unsplit) override {
      seen.push_back(fmt::format("{} {} {} {} {}", site.label, site.name, site.top ? "top" : "in",
                                 tensor::shape_str(site.input), unsplit.name()));
      if (site.name != "out") return nullptr;
      auto layer = std::make_unique<Linear>("out", site.input.back(), 3);
      twin = layer.get();
      return layer;
    }
  } recorder;
  const LayerList list = {
      layer("linear", {{"out_features", std::int64_t{6}}}),
      layer("residual", {}, {layer("linear", {{"out_features", std::int64_t{6}}})}),
      layer("linear", {{"name", std::string("out")}, {"out_features", std::string("classes")}})};
  auto model = build_layer_list(list, LayerListInput{{4}, 3}, recorder);
  EXPECT_THAT(recorder.seen,
              ::testing::ElementsAre("model.layer[0] (linear) layer0 top [1, 4] layer0",
                                     "model.layer[1].body[0] (linear) layer1.body0 in [1, 6] "
                                     "layer1.body0",
                                     "model.layer[1] (residual) layer1 top [1, 6] layer1",
                                     "model.layer[2] (linear) out top [1, 6] out"));
  EXPECT_EQ(model->layers()[2].get(), recorder.twin);
  EXPECT_EQ(model->output_shape(2), (tensor::Shape{2, 3}));
}

TEST(LayerList, AMisfitNamesTheLayerAndBothShapes) {
  const LayerSpec fc = layer("linear", {{"out_features", std::string("classes")}});
  EXPECT_THAT(build_error({fc}), AllOf(HasSubstr("model.layer[0] (linear) takes [B, features]"),
                                       HasSubstr("got [B, 1, 8, 8]"), HasSubstr("flatten")));
  EXPECT_THAT(build_error({layer("flatten"), layer("conv2d", {{"out_channels", std::int64_t{2}},
                                                              {"kernel", std::int64_t{3}}})}),
              AllOf(HasSubstr("model.layer[1] (conv2d) takes [B, C, H, W], got [B, 64]")));
  EXPECT_THAT(build_error({layer(
                  "conv2d", {{"out_channels", std::int64_t{2}}, {"kernel", std::int64_t{9}}})}),
              AllOf(HasSubstr("model.layer[0] (conv2d): "), HasSubstr("[B, 1, 8, 8]")));
  EXPECT_THAT(
      build_error({layer("flatten"), layer("linear", {{"out_features", std::int64_t{12}}})}),
      AllOf(HasSubstr("model.layer[1] (linear), the last layer, gives [B, 12]"),
            HasSubstr("needs [B, 10]")));
  // A residual group whose body changes the shape needs a projection.
  EXPECT_THAT(
      build_error({layer(
          "residual", {},
          {layer("conv2d", {{"out_channels", std::int64_t{4}}, {"kernel", std::int64_t{1}}})})}),
      AllOf(HasSubstr("model.layer[0] (residual): the body gives [B, 4, 8, 8] but the "
                      "identity shortcut gives [B, 1, 8, 8]"),
            HasSubstr("[[model.layer.shortcut]]")));
  // Transformer pieces: an embedding first, heads dividing the width, a tied head's width.
  const LayerSpec embed = layer("embedding", {{"dim", std::int64_t{6}}});
  EXPECT_THAT(build_error({layer("flatten"), embed}, {16}, 256),
              HasSubstr("model.layer[1] (embedding) reads token ids, so it must be the first"));
  EXPECT_THAT(
      build_error({embed, layer("transformer_block", {{"heads", std::int64_t{4}}})}, {16}, 256),
      HasSubstr("model.layer[1] (transformer_block): heads = 4 does not divide the width "
                "d = 6 of its input [B, 16, 6]"));
  EXPECT_THAT(
      build_error({embed, layer("linear", {{"out_features", std::int64_t{5}}}), layer("tied_head")},
                  {16}, 256),
      HasSubstr("model.layer[2] (tied_head) takes [B, 16, 6], got [B, 16, 5]"));
  EXPECT_THAT(build_error({layer("flatten"), layer("tied_head")}),
              HasSubstr("no embedding comes before it"));
  EXPECT_THAT(build_error({layer("relu", {{"name", std::string("a")}}),
                           layer("relu", {{"name", std::string("a")}})}),
              HasSubstr("model.layer[1] (relu): name 'a' is already taken by model.layer[0]"));
}

TEST(LayerList, BadKindsAndParametersListWhatIsAccepted) {
  const auto check = [](const LayerList& list) {
    return error_of<ConfigError>([&] { check_layer_list(list, "model.layer", "m.toml"); });
  };
  EXPECT_THAT(check({layer("conv")}),
              AllOf(HasSubstr("model.layer[0] in m.toml: unknown kind 'conv'; accepted kinds: "
                              "linear, conv2d,"),
                    HasSubstr("residual")));
  EXPECT_THAT(check({layer("linear", {{"out", std::int64_t{3}}})}),
              HasSubstr("model.layer[0] (linear) in m.toml: unknown parameter 'out'; accepted "
                        "parameters of linear: name, out_features, init, init_sigma"));
  EXPECT_THAT(check({layer("relu"), layer("conv2d", {{"kernel", std::int64_t{3}}})}),
              HasSubstr("model.layer[1] (conv2d) in m.toml: missing parameter 'out_channels'"));
  EXPECT_THAT(check({layer("linear", {{"out_features", std::string("ten")}})}),
              HasSubstr("parameter 'out_features' must be an integer or \"classes\", got a string "
                        "\"ten\""));
  EXPECT_THAT(check({layer("dropout", {{"p", 1.0}})}),
              HasSubstr("parameter 'p' = 1 is out of range; accepted: 0 <= p < 1"));
  EXPECT_THAT(check({layer("residual", {}, {layer("relu", {{"alpha", 0.1}})})}),
              HasSubstr("model.layer[0].body[0] (relu) in m.toml: unknown parameter 'alpha'"));
  EXPECT_THAT(check({layer("residual")}),
              HasSubstr("missing parameter 'body', the group's layers; add "
                        "[[model.layer.body]] tables"));
  EXPECT_THAT(check({layer("relu", {}, {layer("relu")})}),
              HasSubstr("(relu) in m.toml: unknown parameter 'body'"));
  EXPECT_THAT(check({layer("")}),
              HasSubstr("model.layer[0] in m.toml: no kind; set kind = one of"));
  // A layer named like a group's member (its full name is <group>.<member>) would declare that
  // member's tensors again: refused by name.
  EXPECT_THAT(
      error_of<ConfigError>([] {
        build_layer_list(
            {layer("flatten", {{"name", std::string("flat")}}),
             layer("residual", {{"name", std::string("r")}},
                   {layer("linear",
                          {{"name", std::string("fc")}, {"out_features", std::int64_t{4}}})}),
             layer("linear", {{"name", std::string("r.fc")}, {"out_features", std::int64_t{10}}})},
            {{1, 2, 2}, 10}, "model.layer");
      }),
      HasSubstr("name 'r.fc' is already taken by model.layer[1].body[0]"));

  // Every kind documents a shape rule and its parameters, here and in docs/MODELS.md.
  std::ifstream in(std::string(DTRAIN_TEST_DATA_DIR) + "/../../../docs/MODELS.md");
  std::ostringstream text;
  text << in.rdbuf();
  const std::string doc = text.str();
  ASSERT_FALSE(doc.empty());
  for (const auto& info : layer_kinds()) {
    EXPECT_FALSE(info.shapes.empty()) << info.kind;
    ASSERT_FALSE(info.params.empty()) << info.kind;
    EXPECT_EQ(info.params[0].name, "name") << info.kind;
    EXPECT_THAT(doc, HasSubstr("`" + info.kind + "`"));
    for (const auto& param : info.params) EXPECT_THAT(doc, HasSubstr("`" + param.name + "`"));
  }
}

}  // namespace
}  // namespace dtrain::nn
