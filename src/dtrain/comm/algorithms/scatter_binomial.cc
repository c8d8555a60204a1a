// Binomial-tree scatter (MPICH's). With ranks renumbered so that the root is 0
// (v = (r - root) mod P) and blocks kept in that order, rank v's subtree is v .. v + m - 1, m its
// lowest set bit (the root's subtree is everything): v receives its subtree's blocks from
// v - m in one message, then hands v + k .. v + 2k - 1 to v + k for k = m/2, m/4, ..., 1 (cut at
// P), keeping block v. The root rotates its input into that order first (a copy, unless root 0).
//
// Cost: ceil(log2 P) alpha + (P - 1)/P N beta, N = P x block bytes (the root sends half of the
// buffer first, then a quarter, ...). Bytes sent by the root: (P - 1) blocks.
#include <cstddef>
#include <cstring>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void scatter_binomial(Channel& channel, const void* input, void* output, std::size_t block_bytes,
                      int root) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (block_bytes == 0) return;
  const auto* in = static_cast<const std::byte*>(input);
  auto blocks = [&](int n) { return static_cast<std::size_t>(n) * block_bytes; };
  const int relative = ring_index(rank - root, ranks);
  int mask = 1;
  while (mask < ranks && (relative & mask) == 0) mask <<= 1;
  const int subtree = std::min(mask, ranks - relative);

  // `tree`: this rank's subtree's blocks in relative order.
  std::vector<std::byte> scratch;
  const std::byte* tree = nullptr;
  if (rank == root) {
    if (root == 0) {
      tree = in;
    } else {
      scratch.resize(blocks(ranks));
      std::memcpy(scratch.data(), in + blocks(root), blocks(ranks - root));
      std::memcpy(scratch.data() + blocks(ranks - root), in, blocks(root));
      tree = scratch.data();
    }
  } else {
    std::byte* into = static_cast<std::byte*>(output);
    if (subtree > 1) {
      scratch.resize(blocks(subtree));
      into = scratch.data();
    }
    channel.recv(ring_index(relative - mask + root, ranks), into, blocks(subtree));
    tree = into;
  }
  std::vector<std::unique_ptr<Request>> sends;
  for (int k = mask >> 1; k > 0; k >>= 1) {
    if (relative + k >= ranks) continue;
    const int child_subtree = std::min(k, ranks - relative - k);
    sends.push_back(channel.isend(ring_index(relative + k + root, ranks), tree + blocks(k),
                                  blocks(child_subtree)));
  }
  if (tree != output) std::memcpy(output, tree, block_bytes);
  channel.wait_all(sends);
}

}  // namespace dtrain::comm
