// AllGatherLinear: a fully connected layer split over a tensor-parallel group in seed 003's plain
// form ("Model Parallelism: partition weights across different processes"), for the MLP.
//
// The full layer is y = x W^T + b with W (out, in). Rank r of P holds rows [r out/P, (r+1) out/P)
// of W (its outputs) and that part of b, and the whole input x (replicated):
//   forward   y_r (B, out/P) = x W_r^T + b_r, then an all-gather of the ranks' y_r into the whole
//             y (B, out), the same on every rank: (P-1)/P x 4 B out bytes sent per rank
//   backward  dy is whole on every rank; dW_r += dy_r^T x and db_r from this rank's columns of dy:
//             no communication for the weight gradients;
//             dx = sum_r dy_r W_r: an allreduce of B x in floats, 2 (P-1)/P x 4 B in bytes
//             (skipped for the first layer, which needs no input gradient)
// Against Megatron's pair (column_parallel_linear.h, row_parallel_linear.h) it communicates after
// every layer, but needs no pairing: each layer stands alone and its output is whole.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/init.h"
#include "dtrain/nn/layer.h"
#include "dtrain/nn/linear.h"

namespace dtrain::nn {

class AllGatherLinear : public Layer {
 public:
  // out_features % group.size() == 0 (ConfigError naming both numbers otherwise). Tensors
  // "<name>.weight" (out/P, in) and "<name>.bias" (out/P).
  AllGatherLinear(std::string name, std::int64_t in_features, std::int64_t out_features,
                  GroupComm& group, InitKind init = InitKind::kHe, float sigma = 0.01f);

  std::string describe() const override;
  tensor::Shape output_shape(const tensor::Shape& input) const override;
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  const tensor::Tensor& forward(const tensor::Tensor& x, const ForwardContext& ctx) override;
  const tensor::Tensor& backward(const tensor::Tensor& dy, bool need_input_grad) override;
  std::vector<Layer*> sublayers() override { return {local_.get()}; }
  // A replica for another micro-batch slot, over the same group (see Layer::clone).
  std::unique_ptr<Layer> clone() const override;

 private:
  std::int64_t out_;
  GroupComm& group_;
  InitKind init_;
  float sigma_;
  std::unique_ptr<Linear> local_;  // Linear(in -> out / P) under the same name
  tensor::Tensor gathered_;        // (P, rows, out/P): the all-gather's rank-major blocks
  tensor::Tensor y_;               // (rows..., out)
  tensor::Tensor dy_local_;        // (rows..., out/P): this rank's columns of dy
  tensor::Tensor dx_;              // (rows..., in), summed over the group
  tensor::Tensor none_;
};

}  // namespace dtrain::nn
