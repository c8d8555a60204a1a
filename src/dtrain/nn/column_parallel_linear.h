// ColumnParallelLinear: Megatron-LM's column-parallel Linear (Shoeybi et al. 2019, section 3),
// with its conjugate operator f in front of it.
//
// The full layer is y = x W^T + b with W (out, in). Over a tensor-parallel group of P ranks, rank
// r holds the rows of W (the output columns of y) that belong to it and the same part of b, so it
// computes its slice of y from the whole, replicated input x:
//   forward   f: identity (x is the same on every rank)
//             y_r (B, out/P) = x (B, in) W_r^T + b_r         2 B in out / P FLOPs, no bytes
//   backward  dW_r += dy_r^T x, db_r += colsum(dy_r)          no communication for the weights
//             dx = sum_r dy_r W_r                              f: one allreduce of B x in floats,
//                                                              2 (P-1)/P x 4 B in bytes per rank
// `groups`: W's rows are `groups` blocks of out/groups rows each (the attention's fused qkv: the
// q, k and v thirds), and rank r takes rows [r g/P, (r+1) g/P) of every block (g = out/groups),
// so its local weight is ((out/P), in) = its q rows, then its k rows, then its v rows: the heads
// r H/P .. (r+1) H/P - 1 of each third, laid out as an unsplit attention over H/P heads expects.
// Which rows of the unsplit tensors a rank holds is tensor_parallel_shards.h's ShardKind::kRows.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/linear.h"

namespace dtrain::nn {

class ColumnParallelLinear : public Layer {
 public:
  // out_features: the unsplit layer's; out_features / group.size() must be whole (checked, the
  // message names both numbers). The tensors are "<name>.weight" (out/P, in), "<name>.bias".
  ColumnParallelLinear(std::string name, std::int64_t in_features, std::int64_t out_features,
                       GroupComm& group);

  std::string describe() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  // dx is summed over the group (f's backward), so it is whole and the same on every rank.
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  std::vector<Layer*> sublayers() override { return {local_.get()}; }
  // A replica for another micro-batch slot (a pipeline stage of tensor-parallel layers): the same
  // sizes over the same group, declared and bound by Model to the same parameters.
  std::unique_ptr<Layer> clone() const override;

  std::int64_t local_out_features() const { return local_->out_features(); }

 private:
  std::int64_t out_;
  GroupComm& group_;
  std::unique_ptr<Linear> local_;  // Linear(in -> out / P) under the same name
  tensor::Tensor dx_;              // (B, ..., in), summed over the group
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
