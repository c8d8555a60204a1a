// build_layer_list_tensor_parallel: one rank's part of a layer list (layer_list.h, model.name =
// "layers") split over a tensor-parallel group of P ranks. The list is built through
// build_layer_list's substitute seam: every layer is made for one worker (all sizes and checks as
// there), then each layer that has a split twin is replaced by it, in the model's list and in
// residual groups' body and shortcut lists alike (a group's input and output stay whole):
//
//   linear, LinearSplit::kAllGather  AllGatherLinear (seed 003's form, as the built-in MLP): rank
//                                    r holds out/P outputs; the activation all-gathered forward,
//                                    its gradient all-reduced backward (not for the first)
//   linear, LinearSplit::kMegatron   a linear, then only elementwise activations (relu, gelu, ...;
//                                    none is fine too), then a linear, in the same list: Megatron's
//                                    pair, the first ColumnParallelLinear (out/P hidden units per
//                                    rank), the second RowParallelLinear (one allreduce of its
//                                    output forward, one of the pair's input gradient backward); a
//                                    linear in no such pair runs replicated
//   transformer_block                make_parallel_transformer_block (heads and MLP units split)
//   attention                        ParallelCausalSelfAttention (heads split)
//   anything else                    replicated: whole on every rank, its gradients bitwise equal
//                                    there (whole inputs, whole output gradients), as the built-in
//                                    GPT's embedding, LayerNorms and tied head
// A split layer that P does not divide (outputs, hidden units, heads) is a ConfigError naming the
// layer and the numbers; so is a list in which no layer splits. The tensors keep the unsplit
// list's names and order; shards says which part of each unsplit tensor this rank holds.
// Bytes per step and rank: the sum of tensor_parallel_cost.h's over the split layers (B times the
// per-sample figure here).
#pragma once

#include <string>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/layer_list.h"
#include "dtrain/nn/tensor_parallel_model.h"

namespace dtrain::nn {

enum class LinearSplit { kAllGather, kMegatron };

// Not initialised: the values come from the unsplit model (slice_shard).
TensorParallelModel build_layer_list_tensor_parallel(const LayerList& layers,
                                                     const LayerListInput& input, GroupComm& group,
                                                     LinearSplit linears,
                                                     const std::string& where = "model.layer");

}  // namespace dtrain::nn
