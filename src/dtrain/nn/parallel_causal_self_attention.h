// ParallelCausalSelfAttention: causal self-attention split by heads over a tensor-parallel group
// (Megatron-LM, section 3): rank r of P computes heads [r H/P, (r+1) H/P) and nothing else.
//
//   qkv_r = f(x) Wqkv_r^T + bqkv_r     ColumnParallelLinear "<name>.qkv", (B, T, d) -> (B, T,
//   3d/P):
//                                      this rank's q, k and v columns (groups = 3)
//   Y_r   = attention over its H/P heads, exactly the unsplit core (causal_self_attention.h) with
//           width d/P and H/P heads                              (B, T, 3d/P) -> (B, T, d/P)
//   y     = g(Y_r Wproj_r^T) + bproj     RowParallelLinear "<name>.proj", (B, T, d/P) -> (B, T, d)
// Communication: one allreduce of B T d floats in forward (g, in proj) and one in backward (f, in
// qkv); the heads themselves need none, each head's softmax reads only its own columns.
// Cost per rank: 1/P of the unsplit layer's FLOPs and of its P buffer (B H/P T^2 floats).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/causal_self_attention.h"
#include "dtrain/nn/column_parallel_linear.h"
#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/row_parallel_linear.h"

namespace dtrain::nn {

class ParallelCausalSelfAttention : public Layer {
 public:
  // heads % group.size() == 0 (ConfigError naming both numbers otherwise).
  ParallelCausalSelfAttention(std::string name, std::int64_t dim, std::int64_t heads,
                              std::int64_t block, GroupComm& group);

  std::string describe() const override;
  // (B, T, d) with 1 <= T <= block -> (B, T, d).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  std::vector<Layer*> sublayers() override { return {qkv_.get(), proj_.get()}; }
  // A replica for another micro-batch slot, over the same group, with the same tile.
  std::unique_ptr<Layer> clone() const override;

 private:
  GroupComm& group_;
  std::int64_t dim_;
  std::int64_t heads_;
  std::int64_t block_;
  std::int64_t local_heads_;
  std::int64_t tile_ = CausalSelfAttention::kDefaultTile;
  std::unique_ptr<ColumnParallelLinear> qkv_;
  std::unique_ptr<RowParallelLinear> proj_;
  AttentionDims dims_;        // this rank's: width d/P, H/P heads
  tensor::Tensor qkv_out_;    // (B, T, 3d/P), kept for backward
  tensor::Tensor probs_;      // (B, H/P, T, T)
  tensor::Tensor heads_out_;  // (B, T, d/P)
  tensor::Tensor dqkv_;       // (B, T, 3d/P)
  tensor::Tensor scratch_;
};

}  // namespace dtrain::nn
