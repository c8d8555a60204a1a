// RowParallelLinear: Megatron-LM's row-parallel Linear, with its conjugate operator g after it.
//
// The full layer is y = x W^T + b with W (out, in). Rank r of a group of P holds the columns of W
// that meet its slice of the input features (W_r: (out, in/P), columns [r in/P, (r+1) in/P)) and
// receives x_r (B, in/P), the output of a column-parallel layer (or of the heads it computes):
//   forward   g: y = sum_r x_r W_r^T, one allreduce of B x out floats (2 (P-1)/P x 4 B out bytes
//             per rank), then + b once: b is replicated, whole on every rank
//   backward  g: identity (dy is whole and the same on every rank)
//             dW_r += dy^T x_r, db += colsum(dy)    (db the same on every rank: b stays replicated)
//             dx_r = dy W_r                          (B, in/P): no communication
// Which columns of the unsplit weight a rank holds is tensor_parallel_shards.h's
// ShardKind::kColumns; the bias is ShardKind::kReplicated.
#pragma once

#include <cstdint>
#include <string>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer.h"

namespace dtrain::nn {

class RowParallelLinear : public Layer {
 public:
  // in_features: the unsplit layer's; in_features / group.size() must be whole (checked).
  // Tensors "<name>.weight" (out, in/P) and "<name>.bias" (out).
  RowParallelLinear(std::string name, std::int64_t in_features, std::int64_t out_features,
                    GroupComm& group);

  std::string describe() const override;
  // (B, ..., in/P) -> (B, ..., out).
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  // A replica for another micro-batch slot, over the same group (see Layer::clone).
  std::unique_ptr<Layer> clone() const override;

  std::int64_t local_in_features() const { return in_local_; }

 private:
  std::int64_t in_;
  std::int64_t in_local_;
  std::int64_t out_;
  GroupComm& group_;
  int weight_index_ = -1;
  int bias_index_ = -1;
  tensor::Tensor weight_, bias_, weight_grad_, bias_grad_;  // views into the ParamStore
  tensor::Tensor x_;                                        // view of the last input (B, ..., in/P)
  tensor::Tensor y_;                                        // (B, ..., out)
  tensor::Tensor dx_;                                       // (B, ..., in/P)
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
