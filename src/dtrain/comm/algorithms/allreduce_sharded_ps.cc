// Sharded parameter-server allreduce (seed 003's "parameter server all-reduce"): rank j owns block
// j of the buffer (blocks.h). Push: every rank sends block j to its owner j and receives every
// other rank's copy of its own block, which it reduces in rank order. Pull: every owner sends its
// reduced block to every other rank.
//
// Cost: 2(P - 1) alpha + 2(P - 1)/P N beta + (P - 1)/P N gamma, like ring, but all P(P - 1)
// messages of a phase are in flight at once (an all-to-all; on a real network, incast). Exact
// bytes sent by rank r (e = element size): e x ((count - |r|) + (P - 1)|r|), which is
// 2(P - 1)/P N when P divides count; received: the same.
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void allreduce_sharded_ps(Channel& channel, void* data, std::int64_t count, DType dtype,
                          ReduceOp op) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (ranks == 1 || count == 0) return;
  const std::size_t element = dtype_size(dtype);
  auto* bytes = static_cast<std::byte*>(data);
  auto block_ptr = [&](int block) {
    return bytes + static_cast<std::size_t>(block_begin(count, ranks, block)) * element;
  };
  auto block_bytes = [&](int block) {
    return static_cast<std::size_t>(block_size(count, ranks, block)) * element;
  };
  const std::size_t own_bytes = block_bytes(rank);

  // Push: the copies of my block arrive in per-sender slots; my copy of block j goes to j.
  std::vector<std::byte> slots(own_bytes * static_cast<std::size_t>(ranks));
  std::vector<std::unique_ptr<Request>> recvs;
  std::vector<std::unique_ptr<Request>> sends;
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank || own_bytes == 0) continue;
    recvs.push_back(
        channel.irecv(peer, slots.data() + own_bytes * static_cast<std::size_t>(peer), own_bytes));
  }
  for (int step = 1; step < ranks; ++step) {
    const int peer = ring_index(rank + step, ranks);  // staggered so owners are not hit at once
    if (block_bytes(peer) > 0)
      sends.push_back(channel.isend(peer, block_ptr(peer), block_bytes(peer)));
  }
  channel.wait_all(recvs);
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank || own_bytes == 0) continue;
    reduce_into(block_ptr(rank), slots.data() + own_bytes * static_cast<std::size_t>(peer),
                block_size(count, ranks, rank), dtype, op);
  }
  // My blocks j != rank are overwritten below: their pushes must have been copied out first.
  channel.wait_all(sends);

  // Pull: send my reduced block to everyone, receive every other owner's block in place.
  recvs.clear();
  sends.clear();
  for (int peer = 0; peer < ranks; ++peer) {
    if (peer == rank || block_bytes(peer) == 0) continue;
    recvs.push_back(channel.irecv(peer, block_ptr(peer), block_bytes(peer)));
  }
  for (int step = 1; step < ranks; ++step) {
    const int peer = ring_index(rank + step, ranks);
    if (own_bytes > 0) sends.push_back(channel.isend(peer, block_ptr(rank), own_bytes));
  }
  channel.wait_all(recvs);
  channel.wait_all(sends);
}

}  // namespace dtrain::comm
