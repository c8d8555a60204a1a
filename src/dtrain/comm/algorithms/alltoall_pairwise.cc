// Pairwise all-to-all (MPICH's long-message alltoall): in step s = 1 .. P-1 rank r sends block
// (r + s) mod P of its input to rank r + s and receives block r of rank r - s's input into block
// (r - s) mod P of its output. All steps are posted at once (the transport matches them per
// peer), staggered so that no rank is the target of every rank in the same step; the own block is
// a local copy. In place (input == output), the input is copied out first.
//
// Cost: (P - 1) alpha + (P - 1)/P N beta, N = P x block bytes. Bytes sent and received per rank:
// exactly (P - 1) blocks.
#include <cstddef>
#include <cstring>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void alltoall_pairwise(Channel& channel, const void* input, void* output, std::size_t block_bytes) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (block_bytes == 0) return;
  auto* out = static_cast<std::byte*>(output);
  auto blocks = [&](int n) { return static_cast<std::size_t>(n) * block_bytes; };
  std::vector<std::byte> copy;
  const auto* in = static_cast<const std::byte*>(input);
  if (input == output && ranks > 1) {
    copy.assign(in, in + blocks(ranks));
    in = copy.data();
  }
  if (in + blocks(rank) != out + blocks(rank)) {
    std::memcpy(out + blocks(rank), in + blocks(rank), block_bytes);
  }
  std::vector<std::unique_ptr<Request>> requests;
  for (int step = 1; step < ranks; ++step) {
    const int from = ring_index(rank - step, ranks);
    requests.push_back(channel.irecv(from, out + blocks(from), block_bytes));
  }
  for (int step = 1; step < ranks; ++step) {
    const int to = ring_index(rank + step, ranks);
    requests.push_back(channel.isend(to, in + blocks(to), block_bytes));
  }
  channel.wait_all(requests);
}

}  // namespace dtrain::comm
