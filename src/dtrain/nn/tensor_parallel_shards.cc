#include "dtrain/nn/tensor_parallel_shards.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::nn {

void for_each_shard_run(const ParamShard& shard, const tensor::Shape& full_shape, int rank,
                        int parts, const ShardRun& run) {
  DTRAIN_CHECK(!full_shape.empty() && full_shape.size() <= 2, "shard of a {}-d tensor",
               full_shape.size());
  const std::int64_t rows = full_shape[0];
  const std::int64_t cols = full_shape.size() == 2 ? full_shape[1] : 1;
  switch (shard.kind) {
    case ShardKind::kReplicated: run(0, 0, rows * cols); return;
    case ShardKind::kRows: {
      const std::int64_t block = rows / shard.groups;
      const std::int64_t mine = block / parts;
      DTRAIN_CHECK_EQ(mine * parts * shard.groups, rows);
      for (std::int64_t g = 0; g < shard.groups; ++g) {
        run((g * block + rank * mine) * cols, g * mine * cols, mine * cols);
      }
      return;
    }
    case ShardKind::kColumns: {
      const std::int64_t mine = cols / parts;
      DTRAIN_CHECK_EQ(mine * parts, cols);
      for (std::int64_t row = 0; row < rows; ++row) {
        run(row * cols + rank * mine, row * mine, mine);
      }
      return;
    }
  }
}

std::int64_t shard_numel(const ParamShard& shard, const tensor::Shape& full_shape, int parts) {
  const std::int64_t numel = tensor::shape_numel(full_shape);
  return shard.kind == ShardKind::kReplicated ? numel : numel / parts;
}

void slice_shard(const ParamShard& shard, const tensor::Shape& full_shape, int rank, int parts,
                 const float* full, float* local) {
  for_each_shard_run(shard, full_shape, rank, parts,
                     [&](std::int64_t full_offset, std::int64_t local_offset, std::int64_t count) {
                       std::copy(full + full_offset, full + full_offset + count,
                                 local + local_offset);
                     });
}

void place_shard(const ParamShard& shard, const tensor::Shape& full_shape, int rank, int parts,
                 const float* local, float* full) {
  for_each_shard_run(shard, full_shape, rank, parts,
                     [&](std::int64_t full_offset, std::int64_t local_offset, std::int64_t count) {
                       std::copy(local + local_offset, local + local_offset + count,
                                 full + full_offset);
                     });
}

}  // namespace dtrain::nn
