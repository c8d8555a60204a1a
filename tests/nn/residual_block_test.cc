// ResidualBlock: finite differences with the identity and the projection shortcut, the forward
// pass against the same computation spelled out with its sub-layers, names and shapes.
#include "dtrain/nn/residual_block.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using testing::random_tensor;

// The block spelled out as separate layers over a copy of its parameters and buffers, to see the
// values inside it: the inputs of its two ReLUs.
struct SpelledOut {
  SpelledOut(ResidualBlock& block, ParamStore& store, std::int64_t in, std::int64_t out,
             std::int64_t stride)
      : projection(block.has_projection()),
        conv1("b.conv1", in, out, 3, stride, 1, false),
        conv2("b.conv2", out, out, 3, 1, 1, false),
        sconv("b.shortcut_conv", in, out, 1, stride, 0, false),
        bn1("b.bn1", out),
        bn2("b.bn2", out),
        sbn("b.shortcut_bn", out) {
    for (Layer* l : layers()) l->declare(twin);
    twin.finalize();
    DTRAIN_CHECK_EQ(twin.num_params(), store.num_params());
    std::copy(store.params(), store.params() + store.num_params(), twin.params());
    std::copy(store.buffers(), store.buffers() + store.num_buffer_elements(), twin.buffers());
    for (Layer* l : layers()) l->bind(twin);
  }
  std::vector<Layer*> layers() {
    std::vector<Layer*> all{&conv1, &bn1, &conv2, &bn2};
    if (projection) all.insert(all.end(), {&sconv, &sbn});
    return all;
  }
  // Fills relu1_in = bn1(conv1(x)) and relu2_in = bn2(conv2(ReLU(relu1_in))) + shortcut(x).
  void run(const tensor::Tensor& x) {
    const ForwardContext ctx;
    relu1_in = bn1.forward(conv1.forward(x, ctx), ctx).clone();
    tensor::Tensor r = relu1_in.clone();
    for (std::int64_t i = 0; i < r.numel(); ++i) r.data()[i] = std::max(r.data()[i], 0.0f);
    relu2_in = bn2.forward(conv2.forward(r, ctx), ctx).clone();
    const tensor::Tensor s = projection ? sbn.forward(sconv.forward(x, ctx), ctx).clone() : x;
    for (std::int64_t i = 0; i < relu2_in.numel(); ++i) relu2_in.data()[i] += s.data()[i];
  }
  // The smallest distance of a ReLU input to the kink at 0.
  float kink_margin(const tensor::Tensor& x) {
    run(x);
    float margin = 1e30f;
    for (const tensor::Tensor* t : {&relu1_in, &relu2_in}) {
      for (std::int64_t i = 0; i < t->numel(); ++i)
        margin = std::min(margin, std::fabs(t->data()[i]));
    }
    return margin;
  }

  bool projection;
  Conv2d conv1, conv2, sconv;
  BatchNorm bn1, bn2, sbn;
  ParamStore twin;
  tensor::Tensor relu1_in, relu2_in;
};

// The block has ReLUs inside, at batch-norm outputs that random inputs cannot be steered away
// from directly. So the check draws (parameters, input) pairs until every ReLU input is at least
// kMargin from 0: a step of h = 1e-3 moves a unit of these small blocks by a few 1e-3 at most, so
// no perturbation crosses a kink, and the tolerances stay those of smooth functions.
constexpr float kMargin = 0.01f;

void check_block(std::int64_t in, std::int64_t out, std::int64_t stride,
                 const tensor::Shape& x_shape, std::uint64_t seed) {
  for (int attempt = 0; attempt < 100; ++attempt, seed += 2) {
    ResidualBlock block("block", in, out, stride);
    ParamStore store;
    bind_single_layer(block, store, seed);
    const tensor::Tensor x = random_tensor(x_shape, seed + 1);
    SpelledOut twin(block, store, in, out, stride);
    if (twin.kink_margin(x) < kMargin) continue;
    testing::GradCheckOptions options;
    options.step = 1e-3;
    options.atol = 5e-3;
    options.rtol = 2e-2;
    options.max_coordinates = 128;
    check_layer_gradients(block, store, x, options);
    return;
  }
  FAIL() << "no draw in 100 had all ReLU inputs at least " << kMargin << " from 0";
}

TEST(ResidualBlock, FiniteDifferencesIdentityShortcut) { check_block(2, 2, 1, {2, 2, 3, 4}, 21); }

TEST(ResidualBlock, FiniteDifferencesProjectionShortcut) { check_block(2, 3, 2, {2, 2, 5, 4}, 31); }

TEST(ResidualBlock, FiniteDifferencesChannelChangeWithoutStride) {
  check_block(3, 2, 1, {2, 3, 3, 3}, 41);
}

// The block's forward equals ReLU(bn2(conv2(ReLU(bn1(conv1(x))))) + shortcut(x)) computed with
// separate layers that share its parameters.
TEST(ResidualBlock, ForwardMatchesTheLayersSpelledOut) {
  for (std::int64_t stride : {1, 2}) {
    const std::int64_t in = 2, out = stride == 1 ? 2 : 4;
    ResidualBlock block("b", in, out, stride);
    ParamStore store;
    bind_single_layer(block, store, 5);
    // Non-trivial batch-norm scales and shifts.
    for (std::size_t i = 0; i < store.param_entries().size(); ++i) {
      if (store.param_entries()[i].name.find("bn") == std::string::npos) continue;
      tensor::Tensor p = store.param(static_cast<int>(i));
      for (std::int64_t c = 0; c < p.numel(); ++c) p.data()[c] += 0.1f * static_cast<float>(c + 1);
    }
    SpelledOut twin(block, store, in, out, stride);
    const tensor::Tensor x = random_tensor({2, in, 6, 5}, 8);
    const std::vector<float> y = block.forward(x, ForwardContext{}).to_vector();
    twin.run(x);
    ASSERT_EQ(y.size(), static_cast<std::size_t>(twin.relu2_in.numel()));
    for (std::size_t i = 0; i < y.size(); ++i) {
      EXPECT_NEAR(y[i], std::max(twin.relu2_in.data()[i], 0.0f), 1e-5f) << i;
    }
  }
}

// The block's backward against its layers spelled out, at ResNet-like shapes where conv1's dx runs
// through the direct kernel (rows of 20 pixels) and adds the identity shortcut's g as its starting
// value, and where a projection's dx is added after col2im (stride 2): dx = conv1'(bn1'(relu'(
// conv2'(bn2'(g))))) + (g or the projection's dx), g = dy * [y > 0]; the parameter gradients too.
TEST(ResidualBlock, BackwardMatchesTheLayersSpelledOut) {
  for (std::int64_t stride : {1, 2}) {
    SCOPED_TRACE(stride);
    const std::int64_t in = 8, out = stride == 1 ? 8 : 16;
    ResidualBlock block("b", in, out, stride);
    ParamStore store;
    bind_single_layer(block, store, 15);
    SpelledOut twin(block, store, in, out, stride);
    const tensor::Tensor x = random_tensor({2, in, 6, 20}, 16);
    const tensor::Tensor y = block.forward(x, ForwardContext{}).clone();
    const tensor::Tensor dy = random_tensor(y.shape(), 17);
    store.zero_grads();
    const tensor::Tensor dx = block.backward(dy, true).clone();

    twin.run(x);  // the twin's layers keep what their backward needs
    twin.twin.zero_grads();
    tensor::Tensor g = dy.clone();
    for (std::int64_t i = 0; i < g.numel(); ++i) {
      if (!(twin.relu2_in.data()[i] > 0.0f)) g.data()[i] = 0.0f;
    }
    tensor::Tensor dr = twin.conv2.backward(twin.bn2.backward(g, true), true).clone();
    for (std::int64_t i = 0; i < dr.numel(); ++i) {
      if (!(twin.relu1_in.data()[i] > 0.0f)) dr.data()[i] = 0.0f;
    }
    tensor::Tensor dx_ref = twin.conv1.backward(twin.bn1.backward(dr, true), true).clone();
    const tensor::Tensor shortcut_dx =
        twin.projection ? twin.sconv.backward(twin.sbn.backward(g, true), true).clone() : g;
    for (std::int64_t i = 0; i < dx_ref.numel(); ++i) dx_ref.data()[i] += shortcut_dx.data()[i];

    ASSERT_EQ(dx.shape(), dx_ref.shape());
    for (std::int64_t i = 0; i < dx.numel(); ++i) {
      ASSERT_NEAR(dx.data()[i], dx_ref.data()[i], 1e-4f * (1.0f + std::fabs(dx_ref.data()[i])))
          << "dx[" << i << "]";
    }
    ASSERT_EQ(store.num_params(), twin.twin.num_params());
    for (std::int64_t i = 0; i < store.num_params(); ++i) {
      ASSERT_NEAR(store.grads()[i], twin.twin.grads()[i],
                  1e-4f * (1.0f + std::fabs(twin.twin.grads()[i])))
          << "grad " << i;
    }
  }
}

TEST(ResidualBlock, NamesShapesAndParameterCount) {
  ResidualBlock block("block1", 16, 32, 2);
  EXPECT_EQ(block.output_shape({8, 16, 28, 28}), (tensor::Shape{8, 32, 14, 14}));
  EXPECT_EQ(block.output_shape({8, 16, 7, 7}), (tensor::Shape{8, 32, 4, 4}));
  ParamStore store;
  block.declare(store);
  store.finalize();
  std::vector<std::string> names;
  for (const auto& e : store.param_entries()) names.push_back(e.name);
  EXPECT_THAT(names,
              ::testing::ElementsAre("block1.conv1.weight", "block1.bn1.weight", "block1.bn1.bias",
                                     "block1.conv2.weight", "block1.bn2.weight", "block1.bn2.bias",
                                     "block1.shortcut_conv.weight", "block1.shortcut_bn.weight",
                                     "block1.shortcut_bn.bias"));
  // 32*16*9 + 64 + 32*32*9 + 64 + 32*16 + 64
  EXPECT_EQ(store.num_params(), 4608 + 64 + 9216 + 64 + 512 + 64);
  EXPECT_EQ(store.buffer_entries().size(), 6u);
  EXPECT_THAT(
      [&] {
        block.output_shape({8, 8, 28, 28});
      },
      ::testing::ThrowsMessage<ShapeError>(::testing::HasSubstr("block1.conv1")));
}

TEST(ResidualBlock, BackwardAccumulatesWithoutInputGradient) {
  ResidualBlock block("b", 2, 2, 1);
  ParamStore store;
  bind_single_layer(block, store, 3);
  const tensor::Tensor x = random_tensor({2, 2, 4, 4}, 4);
  const tensor::Tensor dy = random_tensor({2, 2, 4, 4}, 5);
  block.forward(x, ForwardContext{});
  store.zero_grads();
  EXPECT_EQ(block.backward(dy, false).numel(), 0);
  const std::vector<float> once(store.grads(), store.grads() + store.num_params());
  block.backward(dy, false);
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    EXPECT_NEAR(store.grads()[i], 2.0f * once[static_cast<std::size_t>(i)], 1e-6f) << i;
  }
}

}  // namespace
}  // namespace dtrain::nn
