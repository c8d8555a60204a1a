// Tree allreduce: binomial reduce to rank 0 (reduce_binomial.cc) then binomial broadcast from
// rank 0 (broadcast_binomial.cc).
//
// Cost: 2 ceil(log2 P) (alpha + N beta) + ceil(log2 P) N gamma: logarithmic latency, so it wins
// for small messages; the whole buffer crosses every tree edge, so ring wins for large ones.
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_tree(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  constexpr int kRoot = 0;
  reduce_binomial(channel, data, count, dtype, op, kRoot);
  broadcast_binomial(channel, data, static_cast<std::size_t>(count) * dtype_size(dtype), kRoot);
}

}  // namespace dtrain::comm
