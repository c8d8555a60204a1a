// Synchronized batch norm: P ranks, each normalising its shard of a batch with the global
// statistics, produce the output, input gradient and running statistics of one batch norm over the
// whole batch (to float rounding), and the summed parameter gradients equal the whole batch's.
#include "dtrain/parallel/sync_batch_norm.h"

#include <gtest/gtest.h>

#include <cmath>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_zoo.h"
#include "grad_check.h"

namespace dtrain::parallel {
namespace {

using dtrain::testing::bind_single_layer;
using dtrain::testing::random_tensor;

constexpr std::int64_t kBatch = 12, kChannels = 3, kH = 2, kW = 2;

void expect_close(const float* a, const float* b, std::int64_t n, const char* what) {
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::fabs(b[i]))) << what << " element " << i;
  }
}

class SyncBatchNormSweep : public ::testing::TestWithParam<int> {};

TEST_P(SyncBatchNormSweep, ShardsWithGlobalStatisticsMatchOneBatchNorm) {
  const int ranks = GetParam();
  const tensor::Tensor x = random_tensor({kBatch, kChannels, kH, kW}, 11, 2.0f);
  const tensor::Tensor dy = random_tensor({kBatch, kChannels, kH, kW}, 12);
  const nn::ForwardContext ctx{nn::Mode::kTrain, 0, 0};

  // The reference: one batch norm over all kBatch samples.
  nn::BatchNorm whole("bn", kChannels);
  nn::ParamStore whole_store;
  bind_single_layer(whole, whole_store);
  const tensor::Tensor y_whole = whole.forward(x, ctx).clone();
  const tensor::Tensor dx_whole = whole.backward(dy, true).clone();

  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    const std::int64_t begin = kBatch * comm.rank() / ranks;
    const std::int64_t end = kBatch * (comm.rank() + 1) / ranks;
    nn::BatchNorm bn("bn", kChannels);
    nn::ParamStore store;
    bind_single_layer(bn, store);
    SyncBatchNormReducer reducer(comm);
    bn.set_reducer(&reducer);
    const tensor::Tensor y = bn.forward(x.slice(begin, end), ctx).clone();
    const tensor::Tensor dx = bn.backward(dy.slice(begin, end), true).clone();
    const std::int64_t per_sample = kChannels * kH * kW;
    expect_close(y.data(), y_whole.data() + begin * per_sample, y.numel(), "y");
    expect_close(dx.data(), dx_whole.data() + begin * per_sample, dx.numel(), "dx");
    expect_close(bn.running_mean().data(), whole.running_mean().data(), kChannels, "running_mean");
    expect_close(bn.running_var().data(), whole.running_var().data(), kChannels, "running_var");
    // Parameter gradients stay local; their sum over ranks is the whole batch's.
    std::vector<float> grads(store.grads(), store.grads() + store.num_params());
    comm.allreduce(grads.data(), static_cast<std::int64_t>(grads.size()), DType::kF32,
                   comm::ReduceOp::kSum);
    expect_close(grads.data(), whole_store.grads(), whole_store.num_params(), "dgamma, dbeta");
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, SyncBatchNormSweep, ::testing::Values(1, 2, 3, 4));

TEST(SyncBatchNorm, FindsTheBatchNormsInsideResidualBlocks) {
  nn::ModelSpec spec;
  spec.name = "resnet";
  spec.input = {1, 8, 8};
  spec.num_classes = 4;
  spec.resnet_width = 4;
  spec.resnet_blocks = 1;
  auto model = nn::build_model(spec);
  const auto bns = batch_norm_layers(*model);
  // The stem's batch norm plus two per block, plus the shortcut's where a block projects.
  EXPECT_GE(bns.size(), 3u);
  for (const nn::BatchNorm* bn : bns) EXPECT_NE(bn, nullptr);
}

}  // namespace
}  // namespace dtrain::parallel
