// make_parallel_transformer_block: TransformerBlock (transformer_block.h) split over a
// tensor-parallel group of P ranks as Megatron-LM splits it:
//
//   h = x + attn(ln1(x))          ParallelCausalSelfAttention: heads split, qkv column-parallel,
//                                 proj row-parallel
//   y = h + out(gelu(fc(ln2(h)))) fc ColumnParallelLinear d -> 4d (rank r: hidden units
//                                 [r 4d/P, (r+1) 4d/P)), GELU on its slice, out RowParallelLinear
//                                 4d -> d
// x, h, y and the LayerNorms are whole and replicated: ln1, ln2 compute the same on every rank and
// receive the same gradient (the f allreduce makes it whole), so their parameters' gradients are
// bitwise equal on every rank and their replicas stay equal without any exchange.
// Communication per block and step: forward two allreduces (attn's g, the MLP's g), backward two
// (the MLP's f, attn's f), each of B T d floats: 4 x 2 (P-1)/P x 4 B T d bytes sent per rank.
// Tensor names are TransformerBlock's ("block1.fc.weight", ...), with this rank's shapes. The
// block itself (LayerNorms, GELU, residual adds, forward and backward) is TransformerBlock's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/nn/group_comm.h"
#include "dtrain/nn/transformer_block.h"

namespace dtrain::nn {

// This rank's part of block `name` over `group`; ConfigError when the heads do not divide over it.
std::unique_ptr<TransformerBlock> make_parallel_transformer_block(
    std::string name, std::int64_t dim, std::int64_t heads, std::int64_t block, GroupComm& group);

}  // namespace dtrain::nn
