#include "dtrain/comm/algorithms/binary_trees.h"

#include <algorithm>

namespace dtrain::comm {
namespace {

// NCCL's btree rooted at 0 (see the header); depth left at 0.
TreeLinks btree(int ranks, int rank) {
  TreeLinks links;
  int bit = 1;
  while (bit < ranks && (bit & rank) == 0) bit <<= 1;
  if (rank == 0) {
    if (ranks > 1) links.children[0] = bit >> 1;
    return links;
  }
  int up = (rank ^ bit) | (bit << 1);
  if (up >= ranks) up = rank ^ bit;
  links.parent = up;
  int low = bit >> 1;
  if (low > 0) {
    links.children[0] = rank - low;
    while (low > 0 && rank + low >= ranks) low >>= 1;
    if (low > 0) links.children[1] = rank + low;
  }
  return links;
}

// Links of `rank` in tree `tree`, depth left at 0.
TreeLinks tree_links(int ranks, int rank, int tree) {
  if (tree == 0) return btree(ranks, rank);
  // Tree 1: rank r plays role(r) in tree 0; map the role's links back.
  const bool mirror = ranks % 2 == 0;
  auto role = [&](int r) { return mirror ? ranks - 1 - r : (r - 1 + ranks) % ranks; };
  auto unrole = [&](int v) {
    if (v < 0) return -1;
    return mirror ? ranks - 1 - v : (v + 1) % ranks;
  };
  TreeLinks links = btree(ranks, role(rank));
  links.parent = unrole(links.parent);
  for (int& child : links.children) child = unrole(child);
  return links;
}

}  // namespace

TreeLinks double_binary_tree_links(int ranks, int rank, int tree) {
  TreeLinks links = tree_links(ranks, rank, tree);
  for (int up = links.parent; up >= 0; up = tree_links(ranks, up, tree).parent) ++links.depth;
  return links;
}

int double_binary_tree_depth_bound(int ranks) {
  // Tree 0 adds one level per bit of P - 1 below the root's single child; tree 1 is a relabelling.
  int bits = 0;
  while ((1 << bits) < ranks) ++bits;
  return bits + 1;
}

int double_binary_tree_height(int ranks) {
  int height = 0;
  for (int tree = 0; tree < 2; ++tree) {
    for (int rank = 0; rank < ranks; ++rank) {
      height = std::max(height, double_binary_tree_links(ranks, rank, tree).depth);
    }
  }
  return height;
}

}  // namespace dtrain::comm
