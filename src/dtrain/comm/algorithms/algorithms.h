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
// Buffers up to kRecursiveDoublingBytes use recursive doubling (allreduce_halving_doubling.cc).
inline constexpr std::size_t kRecursiveDoublingBytes = 2048;
void allreduce_halving_doubling(Channel& channel, void* data, std::int64_t count, DType dtype,
                                ReduceOp op);
void allreduce_double_binary_tree(Channel& channel, void* data, std::int64_t count, DType dtype,
                                  ReduceOp op);
// The transport's own allreduce (Transport::native_allreduce); ConfigError when it has none.
void allreduce_native(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op);
// Hierarchical allreduce over two levels of sub-transports (allreduce_hierarchical.cc): `local`
// spans this rank's group (its leader is local rank 0), `leaders` the group leaders (null on the
// other ranks). The Communicator builds both from CommOptions::local_size.
void allreduce_hierarchical(Channel& local, Channel* leaders, void* data, std::int64_t count,
                            DType dtype, ReduceOp op);

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
// Binomial-tree scatter: root's `input` holds P blocks of `block_bytes`, block r for rank r (read
// at the root only, may be null elsewhere); on return each rank's `output` holds its block. The
// root's output may be its own block of input (in place).
void scatter_binomial(Channel& channel, const void* input, void* output, std::size_t block_bytes,
                      int root);
// Binomial-tree gather, the reverse: rank r's `input` (one block) lands in block r of root's
// `output` (P blocks; written at the root only, may be null elsewhere). The root's input may be its
// own block of output (in place).
void gather_binomial(Channel& channel, const void* input, void* output, std::size_t block_bytes,
                     int root);
// Pairwise all-to-all: block j of rank r's `input` (P blocks) lands in block r of rank j's
// `output` (P blocks). input == output is allowed (in place); partial overlap is not.
void alltoall_pairwise(Channel& channel, const void* input, void* output, std::size_t block_bytes);

using AllreduceFn = void (*)(Channel&, void*, std::int64_t, DType, ReduceOp);

// The two algorithms that need more than one Channel: the Communicator runs them itself
// (hierarchical: sub-transports from CommOptions::local_size; auto: the cost model, cost_model.h,
// then the chosen algorithm's `run`).
inline constexpr std::string_view kHierarchicalAllreduce = "hierarchical";
inline constexpr std::string_view kAutoAllreduce = "auto";
// The one that works only where the transport has its own allreduce (mpi, not inproc).
inline constexpr std::string_view kNativeAllreduce = "native";

struct AllreduceAlgorithm {
  std::string_view name;
  // Null for kHierarchicalAllreduce and kAutoAllreduce.
  AllreduceFn run;
};

// "ring", "parameter-server", "sharded-ps", "tree", "halving-doubling", "double-binary-tree",
// "hierarchical", "native", "auto".
std::span<const AllreduceAlgorithm> allreduce_algorithms();
// By name; ConfigError naming the accepted names otherwise.
const AllreduceAlgorithm& find_allreduce_algorithm(std::string_view name);

}  // namespace dtrain::comm
