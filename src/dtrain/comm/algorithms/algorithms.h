// Every collective algorithm, written once against Channel (and so against any Transport). One
// file per algorithm, named after it; each file's leading comment gives the steps and the
// alpha-beta cost (alpha: per-message latency, beta: seconds per byte, gamma: seconds per byte
// reduced, N: bytes of the buffer, P: ranks).
//
// Conventions shared by all of them: `data` holds `count` elements of `dtype`; ReduceOp::kAvg is
// reduced as a sum (the Communicator divides by P afterwards); every rank passes the same count,
// dtype, op and root (the Communicator's header check enforces it).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/algorithms/channel.h"
#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm {

// Allreduce in place: on return every rank's data holds the reduction over all ranks.
void allreduce_ring(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op);
void allreduce_parameter_server(Channel& channel, void* data, std::int64_t count, DType dtype,
                                ReduceOp op);
void allreduce_sharded_ps(Channel& channel, void* data, std::int64_t count, DType dtype,
                          ReduceOp op);
void allreduce_tree(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op);
void allreduce_halving_doubling(Channel& channel, void* data, std::int64_t count, DType dtype,
                                ReduceOp op);

// Ring reduce-scatter in place over the blocks of blocks.h: on return block r of rank r's data
// holds the reduction of block r over all ranks (other blocks hold partial results).
void reduce_scatter_ring(Channel& channel, void* data, std::int64_t count, DType dtype,
                         ReduceOp op);
// Ring allgather in place: rank r contributes block r of data; on return all blocks are filled.
void allgather_ring(Channel& channel, void* data, std::int64_t count, DType dtype);
// Binomial-tree broadcast of `bytes` from `root`.
void broadcast_binomial(Channel& channel, void* data, std::size_t bytes, int root);
// Binomial-tree reduce to `root` in place: root's data ends with the reduction; other ranks' data
// is used as the accumulator and ends with partial results.
void reduce_binomial(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op,
                     int root);

using AllreduceFn = void (*)(Channel&, void*, std::int64_t, DType, ReduceOp);

struct AllreduceAlgorithm {
  std::string_view name;
  AllreduceFn run;
};

// "ring", "parameter-server", "sharded-ps", "tree", "halving-doubling".
std::span<const AllreduceAlgorithm> allreduce_algorithms();
// By name; ConfigError naming the accepted names otherwise.
const AllreduceAlgorithm& find_allreduce_algorithm(std::string_view name);

}  // namespace dtrain::comm
