#include "dtrain/nn/tensor_parallel_cost.h"

#include <vector>

#include "dtrain/nn/all_gather_linear.h"
#include "dtrain/nn/column_parallel_linear.h"
#include "dtrain/nn/parallel_causal_self_attention.h"
#include "dtrain/nn/residual_group.h"
#include "dtrain/nn/row_parallel_linear.h"
#include "dtrain/nn/transformer_block.h"

namespace dtrain::nn {

TensorParallelCost tensor_parallel_layer_cost(Layer& layer, const tensor::Shape& input,
                                              bool input_grad, int parts) {
  const double share = static_cast<double>(parts - 1) / parts;
  const auto in = static_cast<double>(tensor::shape_numel(input));
  const double allreduce_in = 2.0 * share * 4.0 * in;
  if (auto* block = dynamic_cast<TransformerBlock*>(&layer)) {
    // Split when its attention is the split one (sublayers: ln1, attn, ln2, fc, out).
    const std::vector<Layer*> subs = block->sublayers();
    const bool split = subs.size() > 1 && dynamic_cast<ParallelCausalSelfAttention*>(subs[1]);
    return split ? TensorParallelCost{4.0 * allreduce_in, 4} : TensorParallelCost{};
  }
  if (const auto* group = dynamic_cast<ResidualGroup*>(&layer)) {
    // Both branches from the group's input; as ResidualGroup::backward, a branch's first layer
    // computes an input gradient only when the group's input needs one.
    TensorParallelCost sum;
    for (const auto* branch : {&group->body(), &group->shortcut()}) {
      tensor::Shape shape = input;
      for (std::size_t i = 0; i < branch->size(); ++i) {
        Layer& inner = *(*branch)[i];
        const TensorParallelCost cost =
            tensor_parallel_layer_cost(inner, shape, i > 0 || input_grad, parts);
        sum.bytes += cost.bytes;
        sum.collectives += cost.collectives;
        shape = inner.output_shape(shape);
      }
    }
    return sum;
  }
  if (dynamic_cast<ParallelCausalSelfAttention*>(&layer) != nullptr) {
    // g in proj's forward; f in qkv's backward only with an input gradient.
    return input_grad ? TensorParallelCost{2.0 * allreduce_in, 2}
                      : TensorParallelCost{allreduce_in, 1};
  }
  const bool all_gather = dynamic_cast<AllGatherLinear*>(&layer) != nullptr;
  if (all_gather || dynamic_cast<RowParallelLinear*>(&layer) != nullptr) {
    const auto out = static_cast<double>(tensor::shape_numel(layer.output_shape(input)));
    if (!all_gather) return {2.0 * share * 4.0 * out, 1};
    return {share * 4.0 * out + (input_grad ? allreduce_in : 0.0), input_grad ? 2 : 1};
  }
  if (dynamic_cast<ColumnParallelLinear*>(&layer) != nullptr) {
    return input_grad ? TensorParallelCost{allreduce_in, 1} : TensorParallelCost{};
  }
  return {};
}

}  // namespace dtrain::nn
