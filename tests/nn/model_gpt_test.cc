// build_gpt: the parameter count against the closed form (PyTorch's count for the reference model),
// names, weight decay flags, tying, the loss at initialisation, finite differences of a small whole
// GPT, causality end to end, configuration errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/nn/loss.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/tied_output_head.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using ::testing::HasSubstr;
using testing::random_tensor;

ModelSpec gpt_spec(std::int64_t vocab, std::int64_t block, std::int64_t d, std::int64_t heads,
                   std::int64_t layers) {
  ModelSpec spec;
  spec.name = "gpt";
  spec.vocab = vocab;
  spec.block = block;
  spec.d_model = d;
  spec.heads = heads;
  spec.layers = layers;
  return spec;
}

// (B, T) ids drawn from `seed`.
tensor::Tensor random_ids(std::int64_t batch, std::int64_t length, std::int64_t vocab,
                          std::uint64_t seed) {
  tensor::Tensor ids = tensor::Tensor::empty({batch, length});
  Rng rng(seed, 9);
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    ids.data()[i] = std::floor(rng.uniform() * static_cast<float>(vocab));
  }
  return ids;
}

// The reference model (V 256, block 128, d 128, 4 heads, 4 layers), worked by hand:
//   tok 256*128 = 32,768, pos 128*128 = 16,384
//   per block: ln1 256, qkv 128*384 + 384 = 49,536, proj 16,512, ln2 256, fc 128*512 + 512 =
//   66,048, out 512*128 + 128 = 65,664: 198,272; four blocks 793,088
//   ln_f 256, head 0 (tied)                                    total 842,496
// which is what sum(p.numel() for p in GPT(4, 4, 128, 128).parameters()) prints in PyTorch.
TEST(Gpt, ParameterCountEqualsTheClosedFormAndPyTorchs) {
  const ModelSpec spec = gpt_spec(256, 128, 128, 4, 4);
  EXPECT_EQ(gpt_parameter_count(spec), 842496);
  auto model = build_model(spec);
  EXPECT_EQ(model->store().num_params(), 842496);
  EXPECT_EQ(model->output_shape(32), (tensor::Shape{32, 128, 256}));
  for (const ModelSpec& small : {gpt_spec(32, 8, 16, 2, 2), gpt_spec(7, 5, 12, 3, 1)}) {
    EXPECT_EQ(build_model(small)->store().num_params(), gpt_parameter_count(small));
  }
}

TEST(Gpt, LayersNamesDecayAndTying) {
  auto model = build_model(gpt_spec(32, 8, 16, 2, 2));
  std::vector<std::string> names;
  for (const auto& layer : model->layers()) names.push_back(layer->name());
  EXPECT_THAT(names, ::testing::ElementsAre("embed", "block1", "block2", "ln_f", "head"));
  const auto& entries = model->store().param_entries();
  EXPECT_EQ(entries.front().name, "embed.token_weight");
  for (const auto& e : entries) {
    // 2-D weights (Linear weights, both embedding tables) decay; biases and LayerNorm do not.
    EXPECT_EQ(e.weight_decay, e.shape.size() == 2) << e.name;
    EXPECT_NE(e.name.rfind("head", 0), 0u) << "the head declares nothing: " << e.name;
  }
  auto* head = dynamic_cast<TiedOutputHead*>(model->layers().back().get());
  ASSERT_NE(head, nullptr);
  EXPECT_EQ(head->weight().data(), model->store().params() + entries.front().offset);
  EXPECT_EQ(model->param_layer().front(), 0u);  // the tied tensor belongs to the embedding
}

// N(0, 0.02^2) weights make the logits nearly 0: the loss starts near log V nats per token.
TEST(Gpt, ReferenceModelStartsNearUniformLoss) {
  auto model = build_model(gpt_spec(256, 128, 128, 4, 4));
  model->init(1);
  const tensor::Tensor ids = random_ids(2, 128, 256, 3);
  const tensor::Tensor& logits = model->forward(ids, {});
  ASSERT_EQ(logits.shape(), (tensor::Shape{2, 128, 256}));
  std::vector<std::int32_t> labels(256);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i % 256);
  // Not exactly log V: the final LayerNorm gives unit-variance features, so the logits have a
  // standard deviation of about sqrt(d) 0.02 = 0.23, and the input token's own logit more.
  EXPECT_NEAR(softmax_cross_entropy(logits, labels, nullptr), std::log(256.0), 0.1);
}

// A small whole GPT (L = 2, d = 16, 2 heads, T = 8, V = 32): dL/dtheta of L = sum(r * logits)
// against central differences, on coordinates spread over every tensor. Every parameter is scaled
// by 3 (weights of std 0.06, LayerNorm gains of 3) so that attention and GELU are far from linear;
// the step is 2e-3 (not 1e-2): two stacked blocks curve more than one layer does.
TEST(Gpt, WholeModelFiniteDifferenceGradients) {
  auto model = build_model(gpt_spec(32, 8, 16, 2, 2));
  model->init(7);
  ParamStore& store = model->store();
  for (std::int64_t i = 0; i < store.num_params(); ++i) store.params()[i] *= 3.0f;
  const tensor::Tensor ids = random_ids(2, 8, 32, 4);
  const tensor::Tensor r = random_tensor({2, 8, 32}, 5);
  store.zero_grads();
  model->forward(ids, {});
  model->backward(r);
  const std::vector<float> analytic(store.grads(), store.grads() + store.num_params());
  testing::GradCheckOptions options;
  options.step = 2e-3;
  for (const auto& entry : store.param_entries()) {
    const std::int64_t stride = std::max<std::int64_t>(1, entry.numel / 12);
    for (std::int64_t k = 0; k < entry.numel; k += stride) {
      const std::int64_t i = entry.offset + k;
      const float saved = store.params()[i];
      store.params()[i] = static_cast<float>(saved + options.step);
      const double plus = testing::weighted_sum(model->forward(ids, {}), r);
      store.params()[i] = static_cast<float>(saved - options.step);
      const double minus = testing::weighted_sum(model->forward(ids, {}), r);
      store.params()[i] = saved;
      testing::expect_close(entry.name, k, analytic[static_cast<std::size_t>(i)],
                            (plus - minus) / (2.0 * options.step), options);
    }
  }
}

// Changing the token at t + 1 leaves the logits at positions <= t unchanged, bit for bit.
TEST(Gpt, LogitsDoNotSeeLaterTokens) {
  auto model = build_model(gpt_spec(32, 8, 16, 2, 2));
  model->init(3);
  const tensor::Tensor ids = random_ids(2, 8, 32, 6);
  const std::vector<float> before = model->forward(ids, {}).to_vector();
  for (std::int64_t t : {0, 4, 6}) {
    tensor::Tensor changed = ids.clone();
    for (std::int64_t b = 0; b < 2; ++b) {
      changed.at({b, t + 1}) = std::fmod(changed.at({b, t + 1}) + 5.0f, 32.0f);
    }
    const std::vector<float> after = model->forward(changed, {}).to_vector();
    for (std::int64_t b = 0; b < 2; ++b) {
      for (std::int64_t s = 0; s <= t; ++s) {
        for (std::int64_t v = 0; v < 32; ++v) {
          const auto i = static_cast<std::size_t>((b * 8 + s) * 32 + v);
          ASSERT_EQ(after[i], before[i]) << "t=" << t << " b=" << b << " s=" << s;
        }
      }
      const auto next = static_cast<std::size_t>((b * 8 + t + 1) * 32);
      EXPECT_NE(after[next], before[next]);
    }
  }
}

TEST(Gpt, ShorterWindowsThanTheBlockRun) {
  auto model = build_model(gpt_spec(32, 8, 16, 2, 1));
  model->init(1);
  EXPECT_EQ(model->forward(random_ids(3, 5, 32, 1), {}).shape(), (tensor::Shape{3, 5, 32}));
  EXPECT_EQ(model->forward(random_ids(1, 1, 32, 1), {}).shape(), (tensor::Shape{1, 1, 32}));
  EXPECT_THROW(model->forward(random_ids(1, 9, 32, 1), {}), ShapeError);
}

TEST(Gpt, BadSpecsAreConfigErrorsNamingTheKeys) {
  try {
    build_model(gpt_spec(256, 128, 130, 4, 4));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("model.heads: 4 does not divide model.d_model = 130"));
  }
  EXPECT_THROW(build_model(gpt_spec(256, 0, 128, 4, 4)), ConfigError);
  EXPECT_THROW(build_model(gpt_spec(256, 128, 128, 4, 0)), ConfigError);
  ModelSpec unknown;
  unknown.name = "gtp";
  try {
    build_model(unknown);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("accepted: mlp, lenet5, resnet, gpt"));
  }
}

}  // namespace
}  // namespace dtrain::nn
