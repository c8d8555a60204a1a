// Binomial-tree gather (MPICH's), the mirror of scatter_binomial.cc: with v = (r - root) mod P and
// m the lowest set bit of v, rank v receives the blocks of v + k .. v + 2k - 1 from v + k for
// k = 1, 2, ... < m (cut at P), next to its own block, then sends its whole subtree
// v .. v + m - 1 to v - m in one message. The root un-rotates the relative order into rank order
// (a copy, unless root 0, which gathers straight into its output).
//
// Cost: ceil(log2 P) alpha + (P - 1)/P N beta, N = P x block bytes. Bytes received by the root:
// (P - 1) blocks.
#include <cstddef>
#include <cstring>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void gather_binomial(Channel& channel, const void* input, void* output, std::size_t block_bytes,
                     int root) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (block_bytes == 0) return;
  auto* out = static_cast<std::byte*>(output);
  auto blocks = [&](int n) { return static_cast<std::size_t>(n) * block_bytes; };
  const int relative = ring_index(rank - root, ranks);
  int mask = 1;
  while (mask < ranks && (relative & mask) == 0) mask <<= 1;
  const int subtree = std::min(mask, ranks - relative);

  // `tree`: this rank's subtree's blocks in relative order, own block first.
  std::vector<std::byte> scratch;
  std::byte* tree = nullptr;
  if (rank == root && root == 0) {
    tree = out;
  } else if (rank != root && subtree == 1) {
    channel.send(ring_index(relative - mask + root, ranks), input, block_bytes);  // a leaf
    return;
  } else {
    scratch.resize(blocks(subtree));
    tree = scratch.data();
  }
  if (tree != input) std::memcpy(tree, input, block_bytes);
  std::vector<std::unique_ptr<Request>> recvs;
  for (int k = 1; k < mask && relative + k < ranks; k <<= 1) {
    const int child_subtree = std::min(k, ranks - relative - k);
    recvs.push_back(channel.irecv(ring_index(relative + k + root, ranks), tree + blocks(k),
                                  blocks(child_subtree)));
  }
  channel.wait_all(recvs);
  if (rank != root) {
    channel.send(ring_index(relative - mask + root, ranks), tree, blocks(subtree));
  } else if (root != 0) {
    std::memcpy(out + blocks(root), tree, blocks(ranks - root));
    std::memcpy(out, tree + blocks(ranks - root), blocks(root));
  }
}

}  // namespace dtrain::comm
