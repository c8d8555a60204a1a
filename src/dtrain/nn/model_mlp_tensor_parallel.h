// build_mlp_tensor_parallel: one rank's part of build_mlp's MLP (model_mlp.cc) split over a
// tensor-parallel group of P ranks in seed 003's plain form: every Linear an AllGatherLinear
// (all_gather_linear.h: rank r holds out/P of its outputs; forward all-gathers the activations,
// backward all-reduces the activation gradients, weight gradients need no communication);
// flatten, activations and dropout replicated (dropout draws the same mask on every rank: the
// same seed, step and layer).
//
// Per step and rank, B samples, Linear layers i = 1..K with widths d_0 (input) .. d_K (classes):
//   bytes sent = sum_{i=1..K} (P-1)/P x 4 B d_i  (all-gathers)
//              + sum_{i=2..K} 2 (P-1)/P x 4 B d_{i-1}  (allreduces; the first layer has none)
// Every hidden width and the class count must be divisible by P (checked, one line naming them).
#pragma once

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/nn/tensor_parallel_model.h"

namespace dtrain::nn {

TensorParallelModel build_mlp_tensor_parallel(const ModelSpec& spec, GroupComm& group);

}  // namespace dtrain::nn
