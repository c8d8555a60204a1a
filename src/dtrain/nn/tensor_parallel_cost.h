// What one tensor-parallel rank sends in the collectives of a split layer for one forward and
// backward, by the formula (ring allreduce 2 (P-1)/P x 4 n bytes of n floats, ring all-gather
// (P-1)/P x 4 n): what the tensor_parallel strategy and the hybrid grid print beside the
// communicator's count. `input` is the layer's input shape in the split model (a row-parallel
// Linear's is its slice, (B, ..., in/P)); input_grad: whether its backward computes an input
// gradient (Model::backward: not below the first layer with parameters).
//
//   split TransformerBlock           4 allreduces of its input's n floats (its attention's f runs
//   (parallel_transformer_block.h)   whether or not the block's input gradient is needed)
//   ParallelCausalSelfAttention      an allreduce of its output + (input_grad) one of its input,
//                                    n floats each (output and input are both (B, T, d))
//   AllGatherLinear       all-gather of its output + (input_grad) an allreduce of its input
//   ColumnParallelLinear  (input_grad) an allreduce of its input
//   RowParallelLinear     an allreduce of its output
//   ResidualGroup         the sum over its body's and shortcut's layers (their first layers with an
//                         input gradient only when the group's input needs one)
//   any other layer       nothing (replicated)
#pragma once

#include <cstdint>

#include "dtrain/nn/layer.h"
#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

struct TensorParallelCost {
  double bytes = 0.0;            // sent per rank
  std::int64_t collectives = 0;  // allreduce and all-gather calls
};

TensorParallelCost tensor_parallel_layer_cost(Layer& layer, const tensor::Shape& input,
                                              bool input_grad, int parts);

}  // namespace dtrain::nn
