// Megatron's tensor-parallel layers (nn/column_parallel_linear.h, row_parallel_linear.h,
// parallel_causal_self_attention.h, parallel_transformer_block.h) over parallel::CommGroup:
// shards cut and reassemble the unsplit tensors exactly; a GPT split over P = 2, 3, 4 ranks,
// holding the slices of the unsplit GPT's parameters, gives the unsplit logits and, on every rank,
// the slices of the unsplit gradients (to float rounding: the row-parallel sums run in another
// order); the f and g allreduces are 4 per block (2 forward, 2 backward), B T d floats each. The
// MLP in seed 003's all-gather form likewise, its all-gather and allreduce bytes by the formula.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_gpt_tensor_parallel.h"
#include "dtrain/nn/model_mlp_tensor_parallel.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/tensor_parallel_shards.h"
#include "dtrain/parallel/comm_group.h"

namespace dtrain::parallel {
namespace {

TEST(TensorParallelShards, SlicesReassembleTheTensorAndQkvKeepsItsThirds) {
  // qkv of width 4 (12 rows x 2 columns), 2 ranks: rank 1 holds rows 2-3 of q, k and v
  // (rows 2, 3, 6, 7, 10, 11), in that order.
  const tensor::Shape shape{12, 2};
  std::vector<float> full(24);
  for (std::size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  const nn::ParamShard qkv{nn::ShardKind::kRows, 3};
  std::vector<float> part(static_cast<std::size_t>(nn::shard_numel(qkv, shape, 2)));
  ASSERT_EQ(part.size(), 12u);
  nn::slice_shard(qkv, shape, 1, 2, full.data(), part.data());
  EXPECT_EQ(part, (std::vector<float>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
  for (const nn::ParamShard shard :
       {nn::ParamShard{nn::ShardKind::kRows, 1}, qkv, nn::ParamShard{nn::ShardKind::kColumns, 1}}) {
    for (const int parts : {1, 2}) {
      std::vector<float> rebuilt(full.size(), -1.0f);
      for (int r = 0; r < parts; ++r) {
        std::vector<float> mine(static_cast<std::size_t>(nn::shard_numel(shard, shape, parts)));
        nn::slice_shard(shard, shape, r, parts, full.data(), mine.data());
        nn::place_shard(shard, shape, r, parts, mine.data(), rebuilt.data());
      }
      EXPECT_EQ(rebuilt, full);
    }
  }
}

TEST(TensorParallelGpt, SplitForwardAndBackwardEqualTheUnsplitModel) {
  nn::ModelSpec spec;
  spec.name = "gpt";
  spec.vocab = 32;
  spec.block = 8;
  spec.d_model = 24;
  spec.heads = 12;
  spec.layers = 2;
  auto whole = nn::build_gpt(spec);
  whole->init(7);
  const std::int64_t batch = 3;
  tensor::Tensor x = tensor::Tensor::zeros({batch, spec.block});
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data()[i] = static_cast<float>((i * 7 + 3) % 32);
  const nn::ForwardContext ctx{nn::Mode::kTrain, 1, 0, 0};
  const tensor::Tensor& logits = whole->forward(x, ctx);
  const std::vector<float> expected_logits(logits.data(), logits.data() + logits.numel());
  tensor::Tensor dy = tensor::Tensor::zeros(logits.shape());
  for (std::int64_t i = 0; i < dy.numel(); ++i) {
    dy.data()[i] = 0.01f * static_cast<float>((i * 13) % 17) - 0.08f;
  }
  whole->store().zero_grads();
  whole->backward(dy);
  const nn::ParamStore& ws = whole->store();
  float grad_scale = 0.0f;
  for (std::int64_t i = 0; i < ws.num_params(); ++i) {
    grad_scale = std::max(grad_scale, std::abs(ws.grads()[i]));
  }
  for (const int ranks : {2, 3, 4}) {
    comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
      CommGroup group(comm);
      nn::TensorParallelModel split = nn::build_gpt_tensor_parallel(spec, group);
      nn::ParamStore& ls = split.model->store();
      ASSERT_EQ(ls.param_entries().size(), ws.param_entries().size());
      for (std::size_t k = 0; k < ls.param_entries().size(); ++k) {
        const auto& w = ws.param_entries()[k];
        nn::slice_shard(split.shards[k], w.shape, comm.rank(), ranks, ws.params() + w.offset,
                        ls.params() + ls.param_entries()[k].offset);
      }
      const auto before = comm.stats().get("allreduce");
      const tensor::Tensor& out = split.model->forward(x, ctx);
      ASSERT_EQ(out.numel(), static_cast<std::int64_t>(expected_logits.size()));
      float worst = 0.0f;
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        worst = std::max(worst, std::abs(out.data()[i] - expected_logits[static_cast<size_t>(i)]));
      }
      EXPECT_LE(worst, 1e-5f) << "logits, " << ranks << " ranks";
      ls.zero_grads();
      split.model->backward(dy);
      const auto after = comm.stats().get("allreduce");
      // 2 per block forward (g), 2 backward (f), B T d floats each, sent 2 (P-1)/P of it (ring).
      EXPECT_EQ(after.calls - before.calls, 4 * spec.layers);
      const std::int64_t floats = batch * spec.block * spec.d_model;
      EXPECT_EQ(after.bytes_sent - before.bytes_sent,
                4 * spec.layers * 2 * (ranks - 1) * floats * 4 / ranks);
      for (std::size_t k = 0; k < ls.param_entries().size(); ++k) {
        const auto& w = ws.param_entries()[k];
        const auto& l = ls.param_entries()[k];
        std::vector<float> expected(static_cast<std::size_t>(l.numel));
        nn::slice_shard(split.shards[k], w.shape, comm.rank(), ranks, ws.grads() + w.offset,
                        expected.data());
        float diff = 0.0f;
        for (std::int64_t i = 0; i < l.numel; ++i) {
          diff =
              std::max(diff, std::abs(ls.grads()[l.offset + i] - expected[static_cast<size_t>(i)]));
        }
        EXPECT_LE(diff, 1e-5f * grad_scale) << w.name << ", " << ranks << " ranks";
      }
    });
  }
}

TEST(TensorParallelMlp, AllGatherFormEqualsTheUnsplitModel) {
  // Seed 003's form: 12 -> 8 -> 8 -> 4, each Linear's outputs split; forward all-gathers, backward
  // all-reduces the activation gradients of fc2 and fc3 (fc1 needs none).
  nn::ModelSpec spec;
  spec.name = "mlp";
  spec.input = {12};
  spec.hidden = {8, 8};
  spec.num_classes = 4;
  auto whole = nn::build_mlp(spec);
  whole->init(11);
  const std::int64_t batch = 5;
  tensor::Tensor x = tensor::Tensor::zeros({batch, 12});
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    x.data()[i] = 0.1f * static_cast<float>((i * 5) % 11) - 0.5f;
  }
  const nn::ForwardContext ctx{nn::Mode::kTrain, 1, 0, 0};
  const tensor::Tensor& logits = whole->forward(x, ctx);
  const std::vector<float> expected(logits.data(), logits.data() + logits.numel());
  tensor::Tensor dy = tensor::Tensor::zeros(logits.shape());
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.data()[i] = 0.05f * static_cast<float>(i % 7);
  whole->store().zero_grads();
  whole->backward(dy);
  const nn::ParamStore& ws = whole->store();
  for (const int ranks : {2, 4}) {
    comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
      CommGroup group(comm);
      nn::TensorParallelModel split = nn::build_mlp_tensor_parallel(spec, group);
      nn::ParamStore& ls = split.model->store();
      for (std::size_t k = 0; k < ls.param_entries().size(); ++k) {
        const auto& w = ws.param_entries()[k];
        nn::slice_shard(split.shards[k], w.shape, comm.rank(), ranks, ws.params() + w.offset,
                        ls.params() + ls.param_entries()[k].offset);
      }
      const auto gathers = comm.stats().get("allgather");
      const auto sums = comm.stats().get("allreduce");
      const tensor::Tensor& out = split.model->forward(x, ctx);
      for (std::int64_t i = 0; i < out.numel(); ++i) {
        EXPECT_NEAR(out.data()[i], expected[static_cast<std::size_t>(i)], 1e-6f) << i;
      }
      ls.zero_grads();
      split.model->backward(dy);
      // (P-1)/P x 4 B d_i per all-gather (d = 8, 8, 4); 2 (P-1)/P x 4 B d per allreduce (8, 8).
      EXPECT_EQ(comm.stats().get("allgather").bytes_sent - gathers.bytes_sent,
                (ranks - 1) * batch * (8 + 8 + 4) * 4 / ranks);
      EXPECT_EQ(comm.stats().get("allreduce").bytes_sent - sums.bytes_sent,
                2 * (ranks - 1) * batch * (8 + 8) * 4 / ranks);
      EXPECT_DOUBLE_EQ(split.bytes_per_sample * batch,
                       static_cast<double>((ranks - 1) * batch * (8 + 8 + 4) * 4 +
                                           2 * (ranks - 1) * batch * (8 + 8) * 4) /
                           ranks);
      for (std::size_t k = 0; k < ls.param_entries().size(); ++k) {
        const auto& w = ws.param_entries()[k];
        const auto& l = ls.param_entries()[k];
        std::vector<float> slice(static_cast<std::size_t>(l.numel));
        nn::slice_shard(split.shards[k], w.shape, comm.rank(), ranks, ws.grads() + w.offset,
                        slice.data());
        for (std::int64_t i = 0; i < l.numel; ++i) {
          EXPECT_NEAR(ls.grads()[l.offset + i], slice[static_cast<std::size_t>(i)], 1e-6f)
              << w.name;
        }
      }
    });
  }
}

TEST(TensorParallelGpt, HeadsThatDoNotDivideAreAConfigErrorNamingBoth) {
  nn::ModelSpec spec;
  spec.name = "gpt";
  spec.d_model = 24;
  spec.heads = 6;
  comm::spawn_ranks(4, [&](comm::Communicator& comm) {
    CommGroup group(comm);
    try {
      nn::build_gpt_tensor_parallel(spec, group);
      ADD_FAILURE() << "no error";
    } catch (const ConfigError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("model.heads = 6 cannot be split over 4 ranks"), std::string::npos)
          << what;
    }
  });
}

}  // namespace
}  // namespace dtrain::parallel
