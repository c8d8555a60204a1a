// Ring reduce-scatter, the first half of ring allreduce.
//
// Steps: the buffer is cut into P blocks (blocks.h). In step s = 0 .. P-2, rank r sends block
// (r - s - 1) mod P to rank r + 1 and receives block (r - s - 2) mod P from rank r - 1, adding
// it into its own copy. A block starts at rank b + 1 and travels P - 1 hops, gathering one
// contribution per hop, so after step P - 2 rank r holds the full reduction of block r.
//
// Chunking: each step's blocks move in segments of Channel::segment_bytes. All receives and sends
// of a step are posted first; segment k is reduced while segments k + 1 .. are still moving.
//
// Receiving: each segment is an irecv_reduce straight into this rank's block, so a transport that
// can read the sender's memory (inproc) reduces in one pass (read both, write one) with no
// temporary; others receive into a temporary and reduce (Transport's default).
//
// Cost: (P - 1) alpha (more with segments) + (P - 1)/P N beta + (P - 1)/P N gamma. Bytes sent by
// rank r: N - |block r| (every block but its own, once).
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void reduce_scatter_ring(Channel& channel, void* data, std::int64_t count, DType dtype,
                         ReduceOp op) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (ranks == 1 || count == 0) return;
  const std::size_t element = dtype_size(dtype);
  const std::int64_t segment = segment_elements(channel.segment_bytes(), element);
  const int next = ring_index(rank + 1, ranks);
  const int prev = ring_index(rank - 1, ranks);
  auto* bytes = static_cast<std::byte*>(data);

  std::vector<std::unique_ptr<Request>> sends;
  std::vector<std::unique_ptr<Request>> recvs;
  for (int step = 0; step < ranks - 1; ++step) {
    const int send_block = ring_index(rank - step - 1, ranks);
    const int recv_block = ring_index(rank - step - 2, ranks);
    const std::int64_t send_begin = block_begin(count, ranks, send_block);
    const std::int64_t send_size = block_size(count, ranks, send_block);
    const std::int64_t recv_begin = block_begin(count, ranks, recv_block);
    const std::int64_t recv_size = block_size(count, ranks, recv_block);
    recvs.clear();
    sends.clear();
    for (std::int64_t at = 0; at < recv_size; at += segment) {
      const std::int64_t n = std::min(segment, recv_size - at);
      recvs.push_back(channel.irecv_reduce(
          prev, bytes + static_cast<std::size_t>(recv_begin + at) * element, n, dtype, op));
    }
    for (std::int64_t at = 0; at < send_size; at += segment) {
      const std::int64_t n = std::min(segment, send_size - at);
      sends.push_back(channel.isend(next,
                                    bytes + static_cast<std::size_t>(send_begin + at) * element,
                                    static_cast<std::size_t>(n) * element));
    }
    // The next step sends the block just reduced; this step's sent block must be read out first.
    channel.wait_all(recvs);
    channel.wait_all(sends);
  }
}

}  // namespace dtrain::comm
