// Which part of an unsplit model's tensor a tensor-parallel rank holds, and the copies between the
// two layouts: the unsplit model (one worker's layout: what checkpoints, evaluation and the
// optimizer state in a checkpoint use) and a rank's split model (model_gpt_tensor_parallel.h).
//
// For a tensor of the unsplit shape (R, C) (or (R) for a bias: C = 1), rank r of P holds
//   kReplicated  all of it (embeddings, LayerNorms, the row-parallel layers' biases)
//   kRows        rows [r R/(g P), (r+1) R/(g P)) of each of the g blocks of R/g rows, blocks
//                concatenated (column-parallel weights and biases; g = 3 for the fused qkv)
//   kColumns     columns [r C/P, (r+1) C/P) of every row (row-parallel weights)
// Both layouts are row-major, so a shard is a list of contiguous runs of both.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "dtrain/tensor/tensor.h"

namespace dtrain::nn {

enum class ShardKind { kReplicated, kRows, kColumns };

struct ParamShard {
  ShardKind kind = ShardKind::kReplicated;
  std::int64_t groups = 1;  // kRows: the row blocks split alike (3 for qkv)
};

// The run callback: `count` floats at `full_offset` in the unsplit tensor are at `local_offset`
// in the rank's tensor.
using ShardRun =
    std::function<void(std::int64_t full_offset, std::int64_t local_offset, std::int64_t count)>;
// Calls `run` for each contiguous run of rank `rank`'s part of a tensor of shape `full_shape`.
void for_each_shard_run(const ParamShard& shard, const tensor::Shape& full_shape, int rank,
                        int parts, const ShardRun& run);
// The numel of one rank's part.
std::int64_t shard_numel(const ParamShard& shard, const tensor::Shape& full_shape, int parts);
// full -> local: the rank's part of the unsplit tensor.
void slice_shard(const ParamShard& shard, const tensor::Shape& full_shape, int rank, int parts,
                 const float* full, float* local);
// local -> full: writes the rank's part into the unsplit tensor (the rest untouched).
void place_shard(const ParamShard& shard, const tensor::Shape& full_shape, int rank, int parts,
                 const float* local, float* full);

}  // namespace dtrain::nn
