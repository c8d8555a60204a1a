// Hierarchical allreduce (Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE; seed 001): ranks form groups
// of G consecutive ranks (CommOptions::local_size: the threads of one process, the GPUs of one
// node), whose first rank is the group's leader.
//
// Steps: 1. binomial reduce inside each group to its leader; 2. ring allreduce among the P/G
// leaders (the only traffic that crosses groups: one buffer per group instead of one per rank);
// 3. binomial broadcast inside each group from its leader. The Communicator builds the two levels
// with split-style sub-transports (groups and leaders) once, at the first hierarchical call.
//
// Cost, with L = ceil(P/G) groups: 2 ceil(log2 G)(alpha_local + N beta_local) +
// 2(L - 1) alpha + 2(L - 1)/L N beta (+ reductions). It pays when links inside a group are much
// cheaper than across (alpha_local, beta_local << alpha, beta); with one alpha and beta for all
// links (cost_model.h) it is never better than flat algorithms, so `auto` does not choose it.
// Bytes sent by a rank: those of a binomial reduce and broadcast over its group of G ranks
// (N up to the parent in the reduce unless leader, N to each child in the broadcast), plus, at a
// leader, those of ring over the L leaders.
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_hierarchical(Channel& local, Channel* leaders, void* data, std::int64_t count,
                            DType dtype, ReduceOp op) {
  constexpr int kLeader = 0;
  reduce_binomial(local, data, count, dtype, op, kLeader);
  if (leaders != nullptr) allreduce_ring(*leaders, data, count, dtype, op);
  broadcast_binomial(local, data, static_cast<std::size_t>(count) * dtype_size(dtype), kLeader);
}

}  // namespace dtrain::comm
