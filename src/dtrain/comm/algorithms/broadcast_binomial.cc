// Binomial-tree broadcast (MPICH's short-message broadcast). With ranks renumbered so that the
// root is 0 (v = (r - root) mod P): a rank receives once, from v minus its lowest set bit, then
// forwards to v + 2^k for every k below that bit (largest first), so the set of ranks holding the
// data doubles every round.
//
// Cost: ceil(log2 P) (alpha + N beta).
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void broadcast_binomial(Channel& channel, void* data, std::size_t bytes, int root) {
  const int ranks = channel.size();
  if (ranks == 1 || bytes == 0) return;
  const int relative = ring_index(channel.rank() - root, ranks);
  int mask = 1;
  while (mask < ranks) {
    if ((relative & mask) != 0) {
      channel.recv(ring_index(relative - mask + root, ranks), data, bytes);
      break;
    }
    mask <<= 1;
  }
  std::vector<std::unique_ptr<Request>> sends;
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (relative + mask < ranks) {
      sends.push_back(channel.isend(ring_index(relative + mask + root, ranks), data, bytes));
    }
  }
  channel.wait_all(sends);
}

}  // namespace dtrain::comm
