#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_zoo.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::random_tensor;

ModelSpec small_spec() {
  ModelSpec spec;
  spec.input = {1, 4, 4};
  spec.num_classes = 10;
  spec.hidden = {8, 6};
  return spec;
}

std::vector<std::string> layer_names(const Model& model) {
  std::vector<std::string> names;
  for (const auto& layer : model.layers()) names.push_back(layer->name());
  return names;
}

TEST(BuildMlpTest, LayersAreNamedAndShapedInOrder) {
  ModelSpec spec = small_spec();
  spec.dropout = 0.2f;
  auto model = build_mlp(spec);
  EXPECT_THAT(layer_names(*model),
              ElementsAre("flatten", "fc1", "act1", "drop1", "fc2", "act2", "drop2", "fc3"));
  EXPECT_EQ(model->output_shape(5), (tensor::Shape{5, 10}));
  const auto& entries = model->store().param_entries();
  ASSERT_EQ(entries.size(), 6u);
  EXPECT_EQ(entries[0].name, "fc1.weight");
  EXPECT_EQ(entries[0].shape, (tensor::Shape{8, 16}));
  EXPECT_EQ(entries[4].name, "fc3.weight");
  EXPECT_EQ(entries[4].shape, (tensor::Shape{10, 6}));
  // (16 + 1) * 8 + (8 + 1) * 6 + (6 + 1) * 10
  EXPECT_EQ(model->store().num_params(), 136 + 54 + 70);

  spec.dropout = 0.0f;
  spec.hidden = {};
  EXPECT_THAT(layer_names(*build_mlp(spec)), ElementsAre("flatten", "fc1"));
  spec.hidden = {5};
  EXPECT_THAT(layer_names(*build_mlp(spec)), ElementsAre("flatten", "fc1", "act1", "fc2"));
}

TEST(BuildMlpTest, BadSpecsAreConfigErrorsNamingTheKey) {
  auto expect_config_error = [](const ModelSpec& spec, const std::string& key) {
    try {
      build_mlp(spec);
      FAIL() << "expected ConfigError naming " << key;
    } catch (const ConfigError& e) {
      EXPECT_THAT(e.what(), HasSubstr(key));
    }
  };
  ModelSpec spec = small_spec();
  spec.hidden = {8, 0};
  expect_config_error(spec, "model.hidden");
  spec = small_spec();
  spec.hidden = {-3};
  expect_config_error(spec, "model.hidden");
  spec = small_spec();
  spec.activation = "swish";
  expect_config_error(spec, "model.activation");
  spec = small_spec();
  spec.init = "orthogonal";
  expect_config_error(spec, "model.init");
  spec = small_spec();
  spec.dropout = 1.0f;
  expect_config_error(spec, "model.dropout");
  spec = small_spec();
  spec.num_classes = 0;
  expect_config_error(spec, "model.num_classes");
  spec = small_spec();
  spec.input = {1, 0, 4};
  expect_config_error(spec, "model.input");
}

TEST(BuildMlpTest, SameSeedGivesBitwiseIdenticalOutputs) {
  ModelSpec spec = small_spec();
  spec.dropout = 0.3f;
  spec.activation = "gelu";
  const tensor::Tensor x = random_tensor({7, 1, 4, 4}, 1);
  const ForwardContext ctx{Mode::kTrain, 99, 12};
  std::vector<float> outputs[2];
  std::vector<float> params[2];
  for (int run = 0; run < 2; ++run) {
    auto model = build_mlp(spec);
    model->init(2024);
    params[run].assign(model->store().params(),
                       model->store().params() + model->store().num_params());
    outputs[run] = model->forward(x, ctx).to_vector();
  }
  ASSERT_EQ(outputs[0].size(), 70u);
  EXPECT_EQ(std::memcmp(outputs[0].data(), outputs[1].data(), outputs[0].size() * sizeof(float)),
            0);
  EXPECT_EQ(params[0], params[1]);

  auto other = build_mlp(spec);
  other->init(2025);
  EXPECT_NE(std::vector<float>(other->store().params(),
                               other->store().params() + other->store().num_params()),
            params[0]);
}

// The whole model's gradient (forward, loss, backward through every layer) against central
// differences of the cross-entropy loss, for every parameter of a small tanh MLP.
TEST(BuildMlpTest, ModelGradientMatchesFiniteDifferences) {
  ModelSpec spec;
  spec.input = {3};
  spec.hidden = {4, 5};
  spec.num_classes = 3;
  spec.activation = "tanh";
  spec.init = "xavier";
  auto model = build_mlp(spec);
  model->init(3);
  // Non-zero biases so that their gradients are exercised away from the init point.
  ParamStore& store = model->store();
  for (const auto& entry : store.param_entries()) {
    if (entry.name.ends_with(".bias")) {
      for (std::int64_t i = 0; i < entry.numel; ++i) store.params()[entry.offset + i] = 0.1f * i;
    }
  }
  const tensor::Tensor x = random_tensor({4, 3}, 8, 1.5f);
  const std::vector<std::int32_t> labels{0, 2, 1, 2};
  const ForwardContext ctx{};
  auto loss = [&] { return softmax_cross_entropy(model->forward(x, ctx), labels, nullptr); };

  tensor::Tensor dlogits;
  store.zero_grads();
  softmax_cross_entropy(model->forward(x, ctx), labels, &dlogits);
  model->backward(dlogits);
  const std::vector<float> analytic(store.grads(), store.grads() + store.num_params());

  const double h = 1e-2;
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    float& p = store.params()[i];
    const float saved = p;
    p = static_cast<float>(saved + h);
    const double plus = loss();
    p = static_cast<float>(saved - h);
    const double minus = loss();
    p = saved;
    const double numeric = (plus - minus) / (2.0 * h);
    const double a = analytic[static_cast<std::size_t>(i)];
    EXPECT_NEAR(a, numeric, 2e-4 + 2e-2 * std::fabs(numeric)) << "parameter " << i;
  }
}

// Three well-separated Gaussian blobs in 2-D (centres 120 degrees apart on a circle of radius 2,
// noise 0.3): a small ReLU MLP trained by plain full-batch SGD must drive the loss to near zero
// and classify every point, which needs forward, backward, loss and init to agree.
TEST(BuildMlpTest, PlainSgdFitsASeparableProblem) {
  const std::int64_t per_class = 20;
  const std::int64_t n = 3 * per_class;
  tensor::Tensor x = tensor::Tensor::zeros({n, 2});
  std::vector<std::int32_t> labels(static_cast<std::size_t>(n));
  Rng rng(17, 0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int32_t>(i % 3);
    const double angle = 2.0 * 3.14159265358979 * label / 3.0;
    x.at({i, 0}) = static_cast<float>(2.0 * std::cos(angle)) + 0.3f * rng.normal();
    x.at({i, 1}) = static_cast<float>(2.0 * std::sin(angle)) + 0.3f * rng.normal();
    labels[static_cast<std::size_t>(i)] = label;
  }
  ModelSpec spec;
  spec.input = {2};
  spec.hidden = {16};
  spec.num_classes = 3;
  spec.activation = "relu";
  auto model = build_mlp(spec);
  model->init(1);
  ParamStore& store = model->store();
  const ForwardContext ctx{};
  tensor::Tensor dlogits;
  const float first_loss = softmax_cross_entropy(model->forward(x, ctx), labels, nullptr);
  const float lr = 0.2f;
  for (int step = 0; step < 300; ++step) {
    store.zero_grads();
    softmax_cross_entropy(model->forward(x, ctx), labels, &dlogits);
    model->backward(dlogits);
    for (std::int64_t i = 0; i < store.num_params(); ++i)
      store.params()[i] -= lr * store.grads()[i];
  }
  const tensor::Tensor& logits = model->forward(x, ctx);
  const float final_loss = softmax_cross_entropy(logits, labels, nullptr);
  EXPECT_GT(first_loss, 0.5f);
  EXPECT_LT(final_loss, 0.02f) << "loss went from " << first_loss << " to " << final_loss;
  EXPECT_EQ(count_correct(logits, labels), n);
}

}  // namespace
}  // namespace dtrain::nn
