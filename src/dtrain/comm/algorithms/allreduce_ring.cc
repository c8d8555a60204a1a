// Ring allreduce (Patarasuk and Yuan; Baidu, Horovod, NCCL's ring): reduce-scatter around the ring
// (reduce_scatter_ring.cc), after which rank r holds the full reduction of block r, then allgather
// around the ring (allgather_ring.cc). Both phases are chunked into segments and pipelined.
//
// Cost: 2(P - 1) alpha + 2(P - 1)/P N beta + (P - 1)/P N gamma: bandwidth-optimal, latency linear
// in P. Exact bytes sent by rank r, with the blocks of blocks.h (|b| = block size in elements,
// e = element size): e x (2 count - |r| - |(r + 1) mod P|), which is 2(P - 1)/P N when P divides
// count.
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_ring(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  reduce_scatter_ring(channel, data, count, dtype, op);
  allgather_ring(channel, data, count, dtype);
}

}  // namespace dtrain::comm
