#include "dtrain/nn/parallel_transformer_block.h"

#include "dtrain/nn/column_parallel_linear.h"
#include "dtrain/nn/parallel_causal_self_attention.h"
#include "dtrain/nn/row_parallel_linear.h"

namespace dtrain::nn {

std::unique_ptr<TransformerBlock> make_parallel_transformer_block(
    std::string name, std::int64_t dim, std::int64_t heads, std::int64_t block, GroupComm& group) {
  auto attn =
      std::make_unique<ParallelCausalSelfAttention>(name + ".attn", dim, heads, block, group);
  auto fc = std::make_unique<ColumnParallelLinear>(name + ".fc", dim, 4 * dim, group);
  auto out = std::make_unique<RowParallelLinear>(name + ".out", 4 * dim, dim, group);
  const int split = group.size();
  return std::make_unique<TransformerBlock>(std::move(name), dim, heads, block, std::move(attn),
                                            std::move(fc), std::move(out), split);
}

}  // namespace dtrain::nn
