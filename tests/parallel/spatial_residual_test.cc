// Spatial parallelism through residual blocks, strided convolutions and the global average pool
// (nn/spatial_model.h): the ResNet (model_resnet.cc: 3x3 stride-2 convolutions and 1x1 stride-2
// projections in stages 2 and 3) and a layer list's residual groups (a 5x5 halo-2 body, a 4x4
// stride-2 body beside a 1x1 stride-2 shortcut), split over P = 2, 3, 4 ranks along the image
// height, give the unsplit model's output, input gradient (each rank its band's rows), parameter
// gradients (summed over the ranks) and batch-norm running statistics; the halo exchanges send
// 4 B C W ([r > 0] bottom + [r < P - 1] top) bytes forward (top and bottom swapped backward) with
// top = p, bottom = max(0, K - p - S) per convolution; the global pool allreduces B C floats and
// nothing is gathered.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/avg_pool2d.h"
#include "dtrain/nn/batch_norm.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/flatten.h"
#include "dtrain/nn/linear.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/residual_group.h"
#include "dtrain/nn/spatial_model.h"
#include "dtrain/parallel/comm_group.h"
#include "grad_check.h"
#include "spatial_bands.h"

namespace dtrain::parallel {
namespace {

using dtrain::testing::band;
using dtrain::testing::random_tensor;
using dtrain::testing::relative;

constexpr std::int64_t kBatch = 3, kWidth = 8, kClasses = 3;

// The ResNet of model_resnet.cc, width 2, one block per stage: (1, H, 8) -> 3 classes.
std::unique_ptr<nn::Model> resnet(std::int64_t height) {
  nn::ModelSpec spec;
  spec.name = "resnet";
  spec.input = {1, height, kWidth};
  spec.num_classes = kClasses;
  spec.resnet_width = 2;
  spec.resnet_blocks = 1;
  auto model = nn::build_model(spec);
  model->init(7);
  return model;
}

std::vector<std::unique_ptr<nn::Layer>> layers(std::vector<std::unique_ptr<nn::Layer>>& list) {
  return std::move(list);
}

// conv 3x3 -> bn -> relu -> res1 {5x5 pad 2 (no bias), bn, tanh; identity; relu} -> res2
// {4x4 stride 2 pad 1, bn; 1x1 stride 2; no activation} -> global pool -> flatten -> linear.
std::unique_ptr<nn::Model> residual_list(std::int64_t height) {
  auto model = std::make_unique<nn::Model>(tensor::Shape{1, height, kWidth});
  model->add(std::make_unique<nn::Conv2d>("conv", 1, 3, 3, 1, 1));
  model->add(std::make_unique<nn::BatchNorm>("bn", 3));
  model->add(std::make_unique<nn::Activation>("relu", nn::ActivationKind::kRelu));
  std::vector<std::unique_ptr<nn::Layer>> body, shortcut;
  body.push_back(std::make_unique<nn::Conv2d>("res1.conv", 3, 3, 5, 1, 2, /*bias=*/false));
  body.push_back(std::make_unique<nn::BatchNorm>("res1.bn", 3));
  body.push_back(std::make_unique<nn::Activation>("res1.tanh", nn::ActivationKind::kTanh));
  model->add(std::make_unique<nn::ResidualGroup>(
      "res1", layers(body), layers(shortcut),
      std::make_unique<nn::Activation>("res1.relu", nn::ActivationKind::kRelu)));
  body.clear();
  body.push_back(std::make_unique<nn::Conv2d>("res2.conv", 3, 4, 4, 2, 1));
  body.push_back(std::make_unique<nn::BatchNorm>("res2.bn", 4));
  shortcut.push_back(std::make_unique<nn::Conv2d>("res2.shortcut", 3, 4, 1, 2, 0));
  model->add(std::make_unique<nn::ResidualGroup>("res2", layers(body), layers(shortcut), nullptr));
  model->add(nn::AvgPool2d::global("pool"));
  model->add(std::make_unique<nn::Flatten>("flatten"));
  model->add(std::make_unique<nn::Linear>("fc", 4, kClasses));
  model->build();
  model->init(9);
  return model;
}

// Bytes rank r of p sends in a ring allreduce of n elements of e bytes.
std::int64_t ring(std::int64_t n, std::int64_t e, int r, int p) {
  const auto block = [&](int i) { return n * (i + 1) / p - n * i / p; };
  return e * (2 * n - block(r) - block((r + 1) % p));
}

struct ResidualCase {
  bool resnet;
  std::int64_t height;
  int ranks;
};

class SpatialResidualSweep : public ::testing::TestWithParam<ResidualCase> {};

TEST_P(SpatialResidualSweep, BandsGiveTheUnsplitModelsOutputGradientsAndBytes) {
  const auto [is_resnet, height, ranks] = GetParam();
  const tensor::Tensor x = random_tensor({kBatch, 1, height, kWidth}, 31, 1.5f);
  const tensor::Tensor dy = random_tensor({kBatch, kClasses}, 32);
  const nn::ForwardContext ctx{nn::Mode::kTrain, 0, 0};

  auto whole = is_resnet ? resnet(height) : residual_list(height);
  const std::size_t count = whole->layers().size();
  const std::vector<float> initial_buffers(
      whole->store().buffers(), whole->store().buffers() + whole->store().num_buffer_elements());
  const tensor::Tensor y_whole = whole->forward(x, ctx).clone();
  whole->store().zero_grads();
  const tensor::Tensor dx_whole =
      whole->backward_range(dy, {0, count}, 0, /*input_grad=*/true).clone();
  const nn::ParamStore& reference = whole->store();

  // (top, bottom) halo rows of each split convolution, in order: p and max(0, K - p - S).
  const std::vector<std::pair<std::int64_t, std::int64_t>> expected_halos =
      is_resnet ? std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 1},  // conv1
                                                                     {1, 1},  // stage1 conv1
                                                                     {1, 1},  // stage1 conv2
                                                                     {1, 0},  // stage2 conv1 s2
                                                                     {1, 1},  // stage2 conv2
                                                                     {0, 0},  // stage2 1x1 s2
                                                                     {1, 0}, {1, 1}, {0, 0}}
                : std::vector<std::pair<std::int64_t, std::int64_t>>{
                      {1, 1}, {2, 2}, {1, 1}, {0, 0}};  // 3x3, 5x5, 4x4 s2 p1, 1x1 s2
  const std::int64_t pooled = is_resnet ? 8 : 4;        // channels at the global pool

  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    CommGroup group(comm);
    nn::SpatialSplit split = nn::split_spatially(*whole, group);
    nn::Model& model = *split.model;
    nn::ParamStore& store = model.store();
    ASSERT_EQ(store.num_params(), reference.num_params());
    // Everything up to the global pool is split; no gather: flatten and fc follow the pool.
    ASSERT_EQ(split.split_layers, count - 2);
    EXPECT_EQ(split.gathered_per_sample, 0);
    EXPECT_EQ(model.layers().size(), count);
    EXPECT_EQ(split.pooled_channels, std::vector<std::int64_t>{pooled});
    ASSERT_EQ(split.halos.size(), expected_halos.size());
    for (std::size_t k = 0; k < expected_halos.size(); ++k) {
      EXPECT_EQ(split.halos[k].top, expected_halos[k].first) << k;
      EXPECT_EQ(split.halos[k].bottom, expected_halos[k].second) << k;
    }
    std::copy(reference.params(), reference.params() + reference.num_params(), store.params());
    std::copy(initial_buffers.begin(), initial_buffers.end(), store.buffers());
    const std::int64_t rows = height / ranks;
    const tensor::Tensor x_band = band(x, comm.rank() * rows, rows);

    const std::int64_t send_before = comm.stats().get("send").bytes_sent;
    const std::int64_t allreduce_before = comm.stats().get("allreduce").bytes_sent;
    const std::int64_t allgather_before = comm.stats().get("allgather").bytes_sent;
    const tensor::Tensor y = model.forward(x_band, ctx).clone();
    store.zero_grads();
    const tensor::Tensor dx =
        model.backward_range(dy, {0, model.layers().size()}, 0, /*input_grad=*/true).clone();
    const std::int64_t sent = comm.stats().get("send").bytes_sent - send_before;
    const std::int64_t reduced = comm.stats().get("allreduce").bytes_sent - allreduce_before;
    EXPECT_EQ(comm.stats().get("allgather").bytes_sent, allgather_before);
    comm.allreduce(store.grads(), split.split_params, DType::kF32, comm::ReduceOp::kSum);

    EXPECT_LE(relative(y.data(), y_whole.data(), y.numel()), 1e-5)
        << "output, rank " << comm.rank();
    const tensor::Tensor dx_expected = band(dx_whole, comm.rank() * rows, rows);
    EXPECT_LE(relative(dx.data(), dx_expected.data(), dx.numel()), 1e-5)
        << "input gradient, rank " << comm.rank();
    // As spatial_model_test.cc: weight gradients summed band by band, 1e-4.
    for (const nn::ParamEntry& entry : reference.param_entries()) {
      EXPECT_LE(
          relative(store.grads() + entry.offset, reference.grads() + entry.offset, entry.numel),
          1e-4)
          << entry.name << ", rank " << comm.rank();
    }
    EXPECT_LE(relative(store.buffers(), reference.buffers(), reference.num_buffer_elements()), 1e-6)
        << "running statistics, rank " << comm.rank();

    // Halo bytes: forward bottom rows up and top rows down, backward the other way round.
    const int r = comm.rank();
    const bool above = r > 0, below = r + 1 < ranks;
    std::int64_t expected = 0;
    for (const auto& halo : split.halos) {
      const std::int64_t per_row = 4 * kBatch * halo.channels * halo.width;
      expected += per_row * (above * halo.bottom + below * halo.top);  // forward
      expected += per_row * (above * halo.top + below * halo.bottom);  // backward
    }
    EXPECT_EQ(sent, expected) << "rank " << r;
    // Allreduce bytes: each batch norm's (2F + 1, then 2F doubles) and the pool's B C floats.
    std::int64_t expected_reduce = ring(kBatch * pooled, 4, r, ranks);
    for (const std::int64_t f : split.norm_features) {
      expected_reduce += ring(2 * f + 1, 8, r, ranks) + ring(2 * f, 8, r, ranks);
    }
    EXPECT_EQ(reduced, expected_reduce) << "rank " << r;
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SpatialResidualSweep,
                         ::testing::Values(ResidualCase{true, 16, 2}, ResidualCase{true, 24, 3},
                                           ResidualCase{true, 16, 4}, ResidualCase{false, 16, 2},
                                           ResidualCase{false, 24, 3}, ResidualCase{false, 16, 4}),
                         [](const ::testing::TestParamInfo<ResidualCase>& param_info) {
                           return std::string(param_info.param.resnet ? "ResNet" : "Residual") +
                                  "_H" + std::to_string(param_info.param.height) + "_P" +
                                  std::to_string(param_info.param.ranks);
                         });

}  // namespace
}  // namespace dtrain::parallel
