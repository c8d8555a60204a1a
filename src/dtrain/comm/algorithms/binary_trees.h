// The two complementary binary trees of double-binary-tree allreduce (NCCL's ncclGetDtree).
//
// Tree 0 is NCCL's "btree" over ranks 0 .. P-1, rooted at 0, which alternates leaves and inner
// nodes: with b the lowest set bit of r, rank r's parent is (r ^ b) | 2b (or r ^ b when that is
// out of range) and its children are r - b/2 and r + b/2 (the latter shrunk by halving b/2 until
// it is in range); rank 0 has one child, the largest power of two below P. Odd ranks are leaves.
//
// For P = 14: 0 -> 8; 8 -> 4, 12; 4 -> 2, 6; 12 -> 10, 13; 2 -> 1, 3; 6 -> 5, 7; 10 -> 9, 11.
//
// Tree 1 is tree 0 mirrored (rank r plays P-1-r) when P is even, shifted by one (rank r plays
// r-1 mod P) when P is odd, so that the leaves of one tree are the inner nodes of the other: each
// rank forwards data in (about) one tree only, which is what lets two trees each carrying half the
// data use the links in both directions at once.
#pragma once

#include <array>

namespace dtrain::comm {

struct TreeLinks {
  int parent = -1;                      // -1 at the root
  std::array<int, 2> children{-1, -1};  // -1 where absent
  int depth = 0;                        // edges to the root
  int child_count() const { return (children[0] >= 0 ? 1 : 0) + (children[1] >= 0 ? 1 : 0); }
};

// Rank `rank`'s links in tree `tree` (0 or 1) of the double binary tree over `ranks` ranks.
TreeLinks double_binary_tree_links(int ranks, int rank, int tree);
// The largest depth of either tree (O(P log^2 P): for tests and documentation).
int double_binary_tree_height(int ranks);
// ceil(log2 P) + 1 >= double_binary_tree_height(P), in O(log P): what the algorithm schedules by.
int double_binary_tree_depth_bound(int ranks);

}  // namespace dtrain::comm
