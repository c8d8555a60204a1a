// build_gpt_tensor_parallel: one rank's part of build_gpt's GPT (model_gpt.cc) split over a
// tensor-parallel group of P ranks, Megatron-LM's way:
//
//   embed        Embedding (V, d) + (block, d)          replicated
//   block1..L    TransformerBlock, split                 attention split by heads (H/P per rank),
//                                                        MLP hidden units split (4d/P per rank)
//   ln_f         LayerNorm(d)                            replicated
//   head         TiedOutputHead (embed.token_weight)     replicated
// The tensors keep the unsplit model's names, in the same order; shards() says which part of each
// unsplit tensor this rank holds (tensor_parallel_shards.h). Parameters per rank:
// V d + block d + 2 d + L (12 d^2 / P + 7 d / P + 6 d) (the 12 d^2 of each block's four Linears
// and the qkv and fc biases split, the LayerNorms and the proj and out biases replicated).
// Replicated parameters receive bitwise-equal gradients on every rank (their inputs and output
// gradients are whole and equal after the f and g allreduces), so each rank's optimizer keeps its
// copy equal to the others' without exchanging anything.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/model.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/tensor_parallel_model.h"
#include "dtrain/nn/tensor_parallel_shards.h"

namespace dtrain::nn {

// ConfigError (one line, naming the numbers) when spec.heads is not divisible by group.size().
// The model is built but not initialised: its values come from the unsplit model (slice_shard).
TensorParallelModel build_gpt_tensor_parallel(const ModelSpec& spec, GroupComm& group);

// Checks that spec's heads split over `parts` ranks; the message names heads, d_model and parts.
void check_gpt_tensor_split(const ModelSpec& spec, int parts);

}  // namespace dtrain::nn
