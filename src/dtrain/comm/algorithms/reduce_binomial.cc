// Binomial-tree reduce. With ranks renumbered so that the root is 0 (v = (r - root) mod P): in
// round k = 0, 1, ..., a rank whose bit k is set sends its partial result to v - 2^k and stops;
// the others receive from v + 2^k (when it exists) and reduce. After ceil(log2 P) rounds the root
// holds the reduction of all.
//
// Cost: ceil(log2 P) (alpha + N beta + N gamma) on the root's path.
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void reduce_binomial(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op,
                     int root) {
  const int ranks = channel.size();
  if (ranks == 1 || count == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  const int relative = ring_index(channel.rank() - root, ranks);
  std::vector<std::byte> incoming;
  for (int mask = 1; mask < ranks; mask <<= 1) {
    if ((relative & mask) != 0) {
      channel.send(ring_index(relative - mask + root, ranks), data, bytes);
      return;
    }
    if (relative + mask < ranks) {
      incoming.resize(bytes);
      channel.recv(ring_index(relative + mask + root, ranks), incoming.data(), bytes);
      reduce_into(data, incoming.data(), count, dtype, op);
    }
  }
}

}  // namespace dtrain::comm
