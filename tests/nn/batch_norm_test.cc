// BatchNorm: finite differences (train and eval, 2-D and 4-D), running statistics against values
// computed by hand, eval mode, the synchronized-batch-norm hooks, and the fused ReLU against a
// separate one.
#include "dtrain/nn/batch_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/tensor/elementwise.h"
#include "grad_check.h"

namespace dtrain::nn {
namespace {

using testing::bind_single_layer;
using testing::check_layer_gradients;
using testing::random_tensor;

// gamma = 0.5, 1.0, 1.5, ... and beta = 0.1, -0.2, 0.3, ... so that a gamma/beta mix-up shows.
void set_affine(BatchNorm& bn) {
  tensor::Tensor gamma = bn.weight(), beta = bn.bias();
  for (std::int64_t c = 0; c < bn.features(); ++c) {
    gamma.data()[c] = 0.5f * static_cast<float>(c + 1);
    beta.data()[c] = (c % 2 == 0 ? 0.1f : -0.2f) * static_cast<float>(c + 1);
  }
}

TEST(BatchNorm, DeclaresAndInitialises) {
  BatchNorm bn("bn1", 3);
  ParamStore store;
  bind_single_layer(bn, store);
  ASSERT_EQ(store.param_entries().size(), 2u);
  EXPECT_EQ(store.param_entries()[0].name, "bn1.weight");
  EXPECT_EQ(store.param_entries()[1].name, "bn1.bias");
  EXPECT_FALSE(store.param_entries()[0].weight_decay);
  EXPECT_FALSE(store.param_entries()[1].weight_decay);
  ASSERT_EQ(store.buffer_entries().size(), 2u);
  EXPECT_EQ(store.buffer_entries()[0].name, "bn1.running_mean");
  EXPECT_EQ(store.buffer_entries()[1].name, "bn1.running_var");
  EXPECT_EQ(bn.weight().to_vector(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(bn.bias().to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(bn.running_mean().to_vector(), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(bn.running_var().to_vector(), (std::vector<float>{1, 1, 1}));
}

TEST(BatchNorm, FiniteDifferencesTrain2d) {
  BatchNorm bn("bn", 3);
  ParamStore store;
  bind_single_layer(bn, store);
  set_affine(bn);
  check_layer_gradients(bn, store, random_tensor({6, 3}, 1, 2.0f));
}

TEST(BatchNorm, FiniteDifferencesTrain4d) {
  BatchNorm bn("bn", 2);
  ParamStore store;
  bind_single_layer(bn, store);
  set_affine(bn);
  check_layer_gradients(bn, store, random_tensor({3, 2, 4, 3}, 2, 2.0f));
}

TEST(BatchNorm, FiniteDifferencesEval) {
  for (const tensor::Shape& shape : {tensor::Shape{4, 3}, tensor::Shape{2, 3, 3, 2}}) {
    BatchNorm bn("bn", 3);
    ParamStore store;
    bind_single_layer(bn, store);
    set_affine(bn);
    tensor::Tensor mean = bn.running_mean(), var = bn.running_var();
    for (std::int64_t c = 0; c < 3; ++c) {
      mean.data()[c] = 0.3f * static_cast<float>(c) - 0.2f;
      var.data()[c] = 0.5f + static_cast<float>(c);
    }
    testing::GradCheckOptions options;
    options.mode = Mode::kEval;
    check_layer_gradients(bn, store, random_tensor(shape, 3), options);
  }
}

// Train mode normalizes each channel to mean beta and (biased) standard deviation |gamma|.
TEST(BatchNorm, TrainOutputHasMeanBetaAndStdGamma) {
  BatchNorm bn("bn", 2);
  ParamStore store;
  bind_single_layer(bn, store);
  set_affine(bn);  // gamma {0.5, 1.0}, beta {0.1, -0.4}
  const tensor::Tensor x = random_tensor({5, 2, 3, 3}, 4, 3.0f);
  const tensor::Tensor& y = bn.forward(x, ForwardContext{});
  for (std::int64_t c = 0; c < 2; ++c) {
    double sum = 0.0, sum_sq = 0.0;
    for (std::int64_t b = 0; b < 5; ++b)
      for (std::int64_t p = 0; p < 9; ++p) {
        const double v = y.data()[(b * 2 + c) * 9 + p];
        sum += v;
        sum_sq += v * v;
      }
    const double mean = sum / 45.0;
    const double var = sum_sq / 45.0 - mean * mean;
    EXPECT_NEAR(mean, bn.bias().data()[c], 1e-5);
    // var(y) = gamma^2 var / (var + eps), eps = 1e-5 against var ~ 3: within 1e-5 relative.
    EXPECT_NEAR(std::sqrt(var), bn.weight().data()[c], 1e-4);
  }
}

// Running statistics over three steps, momentum 0.1, worked by hand:
//   step 1 and 2, x = channel 0 {1, 2, 3, 4}: mean 2.5, biased var 1.25, unbiased 5/3
//                     channel 1 {0, 0, 2, -2}: mean 0, biased var 2, unbiased 8/3
//   step 3,       x = channel 0 {0, 0, 0, 4}: mean 1, unbiased var (1+1+1+9)/3 = 4
//                     channel 1 {1, 1, 1, 1}: mean 1, unbiased var 0
//   running_mean[0]: 0 -> 0.25 -> 0.475 -> 0.9 * 0.475 + 0.1 = 0.5275
//   running_var[0]:  1 -> 0.9 + 1/6 = 1.0666667 -> 0.96 + 1/6 = 1.1266667 -> 1.014 + 0.4 = 1.414
//   running_mean[1]: 0 -> 0 -> 0 -> 0.1
//   running_var[1]:  1 -> 0.9 + 0.2666667 = 1.1666667 -> 1.05 + 0.2666667 = 1.3166667 -> 1.185
TEST(BatchNorm, RunningStatisticsByHand) {
  BatchNorm bn("bn", 2, 0.1f);
  ParamStore store;
  bind_single_layer(bn, store);
  const tensor::Tensor x12 = tensor::Tensor::from({4, 2}, {1, 0, 2, 0, 3, 2, 4, -2});
  const tensor::Tensor x3 = tensor::Tensor::from({4, 2}, {0, 1, 0, 1, 0, 1, 4, 1});
  bn.forward(x12, ForwardContext{});
  EXPECT_NEAR(bn.running_mean().data()[0], 0.25f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[0], 1.0666667f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[1], 1.1666667f, 1e-6f);
  bn.forward(x12, ForwardContext{});
  EXPECT_NEAR(bn.running_mean().data()[0], 0.475f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[0], 1.1266667f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[1], 1.3166667f, 1e-6f);
  bn.forward(x3, ForwardContext{});
  EXPECT_NEAR(bn.running_mean().data()[0], 0.5275f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[0], 1.414f, 1e-6f);
  EXPECT_NEAR(bn.running_mean().data()[1], 0.1f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[1], 1.185f, 1e-6f);
  // Eval mode reads the running statistics and leaves them alone.
  ForwardContext eval;
  eval.mode = Mode::kEval;
  bn.forward(x3, eval);
  EXPECT_NEAR(bn.running_mean().data()[0], 0.5275f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[1], 1.185f, 1e-6f);
}

// In 4-D the unbiased correction uses N = B*H*W: channel values {0, 2, 4, 6} over B=2, H*W=2 have
// biased var 5 and unbiased var 20/3, so running_var = 0.5 * 1 + 0.5 * 20/3 = 3.8333333 (m = 0.5).
TEST(BatchNorm, RunningVarUsesAllPixels) {
  BatchNorm bn("bn", 1, 0.5f);
  ParamStore store;
  bind_single_layer(bn, store);
  bn.forward(tensor::Tensor::from({2, 1, 1, 2}, {0, 2, 4, 6}), ForwardContext{});
  EXPECT_NEAR(bn.running_mean().data()[0], 1.5f, 1e-6f);
  EXPECT_NEAR(bn.running_var().data()[0], 3.8333333f, 1e-6f);
}

// y = gamma (x - running_mean) / sqrt(running_var + eps) + beta, eps = 0.01 for round numbers:
// x = 3, mean 1, var 3.99 -> (3 - 1) / 2 = 1, times gamma 2 plus beta 0.5 = 2.5.
TEST(BatchNorm, EvalUsesRunningStatistics) {
  BatchNorm bn("bn", 1, 0.1f, 0.01f);
  ParamStore store;
  bind_single_layer(bn, store);
  tensor::Tensor mean = bn.running_mean(), var = bn.running_var();
  tensor::Tensor gamma = bn.weight(), beta = bn.bias();
  mean.data()[0] = 1.0f;
  var.data()[0] = 3.99f;
  gamma.data()[0] = 2.0f;
  beta.data()[0] = 0.5f;
  ForwardContext eval;
  eval.mode = Mode::kEval;
  const std::vector<float> y = bn.forward(tensor::Tensor::from({2, 1}, {3, -1}), eval).to_vector();
  EXPECT_NEAR(y[0], 2.5f, 1e-6f);
  EXPECT_NEAR(y[1], -1.5f, 1e-6f);  // (-1 - 1) / 2 * 2 + 0.5
  // A batch of one is fine in eval mode, not in train mode.
  EXPECT_NO_THROW(bn.forward(tensor::Tensor::from({1, 1}, {3}), eval));
  EXPECT_THAT(
      [&] {
        bn.forward(tensor::Tensor::from({1, 1}, {3}), ForwardContext{});
      },
      ::testing::ThrowsMessage<ShapeError>(::testing::HasSubstr("bn")));
}

TEST(BatchNorm, ShapeErrors) {
  BatchNorm bn("bn3", 16);
  EXPECT_EQ(bn.output_shape({8, 16, 5, 5}), (tensor::Shape{8, 16, 5, 5}));
  EXPECT_THAT(
      [&] {
        bn.output_shape({8, 6, 5, 5});
      },
      ::testing::ThrowsMessage<ShapeError>(
          ::testing::AllOf(::testing::HasSubstr("bn3"), ::testing::HasSubstr("[B, 6, 5, 5]"))));
  EXPECT_THROW(bn.output_shape({8, 16, 5}), ShapeError);
  EXPECT_THROW(BatchNorm("bad", 0), ConfigError);
}

// A synchronized batch norm simulated in one process: "rank 0" holds half the batch and its reducer
// adds the other half's sums, as an allreduce would. Its output and dx must equal those rows of a
// batch norm over the whole batch.
class OtherHalfReducer : public BatchNormReducer {
 public:
  ChannelStats other_stats;
  std::vector<double> other_sum_dy, other_sum_dy_xhat;

  void reduce_statistics(ChannelStats& stats) override {
    for (std::size_t c = 0; c < stats.sum.size(); ++c) {
      stats.sum[c] += other_stats.sum[c];
      stats.sum_sq[c] += other_stats.sum_sq[c];
    }
    stats.count += other_stats.count;
  }
  void reduce_gradient_sums(std::vector<double>& sum_dy,
                            std::vector<double>& sum_dy_xhat) override {
    for (std::size_t c = 0; c < sum_dy.size(); ++c) {
      sum_dy[c] += other_sum_dy[c];
      sum_dy_xhat[c] += other_sum_dy_xhat[c];
    }
  }
};

TEST(BatchNorm, SyncHooksGiveTheWholeBatchResult) {
  const std::int64_t features = 2, plane = 3;
  const tensor::Tensor x = random_tensor({4, features, 1, plane}, 9, 2.0f);
  const tensor::Tensor dy = random_tensor({4, features, 1, plane}, 10);
  BatchNorm whole("bn", features);
  ParamStore whole_store;
  bind_single_layer(whole, whole_store);
  const std::vector<float> y_whole = whole.forward(x, ForwardContext{}).to_vector();
  const std::vector<float> dx_whole = whole.backward(dy, true).to_vector();

  BatchNorm half("bn", features);
  OtherHalfReducer other;
  half.set_reducer(&other);
  ParamStore half_store;
  bind_single_layer(half, half_store);
  const tensor::Tensor x_other = x.slice(2, 4);
  half.channel_sums(x_other, other.other_stats);
  // The other rank's dy sums, with its xhat = y_whole (gamma 1, beta 0) of rows 2 and 3.
  other.other_sum_dy.assign(features, 0.0);
  other.other_sum_dy_xhat.assign(features, 0.0);
  for (std::int64_t b = 2; b < 4; ++b)
    for (std::int64_t c = 0; c < features; ++c)
      for (std::int64_t p = 0; p < plane; ++p) {
        const auto i = static_cast<std::size_t>((b * features + c) * plane + p);
        other.other_sum_dy[static_cast<std::size_t>(c)] += dy.data()[i];
        other.other_sum_dy_xhat[static_cast<std::size_t>(c)] +=
            static_cast<double>(dy.data()[i]) * y_whole[i];
      }
  const std::vector<float> y_half = half.forward(x.slice(0, 2), ForwardContext{}).to_vector();
  const std::vector<float> dx_half = half.backward(dy.slice(0, 2), true).to_vector();
  ASSERT_EQ(y_half.size(), 2u * features * plane);
  for (std::size_t i = 0; i < y_half.size(); ++i) {
    EXPECT_NEAR(y_half[i], y_whole[i], 1e-5f) << i;
    EXPECT_NEAR(dx_half[i], dx_whole[i], 1e-5f) << i;
  }
  // Running statistics are those of the whole batch too.
  EXPECT_NEAR(half.running_var().data()[0], whole.running_var().data()[0], 1e-6f);
}

// The fused ReLU (ResidualBlock's bn1) against a plain batch norm followed by tensor::relu and
// tensor::relu_backward, bit for bit: train and eval, planes of 1, 21 and 49 values (vector tails),
// and the two-pass path a reducer takes (an identity reducer: the same sums).
struct IdentityReducer final : BatchNormReducer {
  void reduce_statistics(ChannelStats&) override {}
  void reduce_gradient_sums(std::vector<double>&, std::vector<double>&) override {}
};

TEST(BatchNorm, FusedReluEqualsBatchNormThenReluBitForBit) {
  const std::vector<tensor::Shape> shapes = {{6, 3}, {3, 2, 7, 3}, {2, 5, 7, 7}};
  for (const tensor::Shape& shape : shapes) {
    for (const bool train : {true, false}) {
      for (const bool reduced : {false, true}) {
        SCOPED_TRACE(tensor::shape_str(shape) + (train ? " train" : " eval") +
                     (reduced ? " with a reducer" : ""));
        const std::int64_t features = shape[1];
        // beta of mixed signs so that a good share of the outputs is cut by the ReLU.
        const tensor::Tensor x = random_tensor(shape, 31, 2.0f);
        const tensor::Tensor dy = random_tensor(shape, 32);
        ForwardContext ctx;
        ctx.mode = train ? Mode::kTrain : Mode::kEval;
        IdentityReducer identity;
        BatchNorm plain("bn", features), fused("bn", features);
        fused.set_fused_relu(true);
        ParamStore plain_store, fused_store;
        bind_single_layer(plain, plain_store);
        bind_single_layer(fused, fused_store);
        for (BatchNorm* bn : {&plain, &fused}) {
          set_affine(*bn);
          if (reduced) bn->set_reducer(&identity);
          tensor::Tensor mean = bn->running_mean(), var = bn->running_var();
          for (std::int64_t c = 0; c < features; ++c) {
            mean.data()[c] = 0.1f * static_cast<float>(c);
            var.data()[c] = 1.0f + 0.5f * static_cast<float>(c);
          }
        }
        const tensor::Tensor& h = plain.forward(x, ctx);
        tensor::Tensor r = tensor::Tensor::empty(shape);
        tensor::relu(h.data(), r.data(), r.numel());
        const std::vector<float> y = fused.forward(x, ctx).to_vector();
        ASSERT_EQ(y, r.to_vector());
        std::int64_t cut = 0;
        for (const float v : y) cut += v == 0.0f ? 1 : 0;
        EXPECT_GT(cut, 0);
        EXPECT_LT(cut, r.numel());

        tensor::Tensor g = tensor::Tensor::empty(shape);
        tensor::relu_backward(r.data(), dy.data(), g.data(), g.numel());
        const std::vector<float> dx_plain = plain.backward(g, true).to_vector();
        const std::vector<float> dx_fused = fused.backward(dy, true).to_vector();
        EXPECT_EQ(dx_fused, dx_plain);
        EXPECT_EQ(fused.weight().to_vector(), plain.weight().to_vector());
        EXPECT_EQ(fused_store.grad(0).to_vector(), plain_store.grad(0).to_vector());
        EXPECT_EQ(fused_store.grad(1).to_vector(), plain_store.grad(1).to_vector());
      }
    }
  }
}

// forward_add_relu (ResidualBlock's bn2 with the block's sum and ReLU) against forward and then
// tensor::add_relu, bit for bit, in train and eval mode, with vector tails (planes of 21 values).
TEST(BatchNorm, ForwardAddReluEqualsForwardThenAddReluBitForBit) {
  const tensor::Shape shape = {3, 4, 7, 3};
  const tensor::Tensor x = random_tensor(shape, 41, 2.0f);
  const tensor::Tensor shortcut = random_tensor(shape, 42);
  for (const bool train : {true, false}) {
    SCOPED_TRACE(train ? "train" : "eval");
    ForwardContext ctx;
    ctx.mode = train ? Mode::kTrain : Mode::kEval;
    BatchNorm plain("bn", shape[1]), fused("bn", shape[1]);
    ParamStore plain_store, fused_store;
    bind_single_layer(plain, plain_store);
    bind_single_layer(fused, fused_store);
    set_affine(plain);
    set_affine(fused);
    const tensor::Tensor& h = plain.forward(x, ctx);
    tensor::Tensor expected = tensor::Tensor::empty(shape);
    tensor::add_relu(h.data(), shortcut.data(), expected.data(), expected.numel());
    const std::vector<float> y = fused.forward_add_relu(x, shortcut, ctx).to_vector();
    EXPECT_EQ(y, expected.to_vector());
    EXPECT_EQ(fused.running_mean().to_vector(), plain.running_mean().to_vector());
    // The next plain forward has no residual left over.
    EXPECT_EQ(fused.forward(x, ctx).to_vector(), plain.forward(x, ctx).to_vector());
  }
}

}  // namespace
}  // namespace dtrain::nn
