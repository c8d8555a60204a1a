// The two trees of double-binary-tree allreduce (algorithms/binary_trees.h): each spans every
// rank with consistent parent and child links, is shallow, and complements the other.
#include "dtrain/comm/algorithms/binary_trees.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace dtrain::comm {
namespace {

int ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

TEST(BinaryTreesTest, EachTreeSpansAllRanksWithConsistentLinks) {
  for (int ranks = 1; ranks <= 70; ++ranks) {
    for (int tree = 0; tree < 2; ++tree) {
      int roots = 0;
      std::vector<int> claimed(static_cast<std::size_t>(ranks), 0);  // times listed as a child
      for (int r = 0; r < ranks; ++r) {
        const TreeLinks links = double_binary_tree_links(ranks, r, tree);
        if (links.parent < 0) {
          ++roots;
          EXPECT_EQ(links.depth, 0);
        } else {
          ASSERT_LT(links.parent, ranks);
          const TreeLinks up = double_binary_tree_links(ranks, links.parent, tree);
          EXPECT_TRUE(up.children[0] == r || up.children[1] == r)
              << "P=" << ranks << " tree " << tree << " rank " << r;
          EXPECT_EQ(links.depth, up.depth + 1);
        }
        for (int child : links.children) {
          if (child < 0) continue;
          ASSERT_LT(child, ranks);
          EXPECT_NE(child, r);
          ++claimed[static_cast<std::size_t>(child)];
        }
        EXPECT_LE(links.depth, double_binary_tree_depth_bound(ranks)) << "P=" << ranks;
      }
      EXPECT_EQ(roots, 1) << "P=" << ranks << " tree " << tree;
      int children = 0;
      for (int c : claimed) {
        EXPECT_LE(c, 1);
        children += c;
      }
      EXPECT_EQ(children, ranks - 1) << "P=" << ranks << " tree " << tree;
    }
    EXPECT_LE(double_binary_tree_height(ranks), ceil_log2(ranks) + 1);
  }
}

TEST(BinaryTreesTest, InnerNodesOfOneTreeAreLeavesOfTheOther) {
  // Why two trees carry the data at full bandwidth: for even P (mirror) no rank has children in
  // both trees; for odd P (shift) only rank 0 may.
  for (int ranks = 2; ranks <= 70; ++ranks) {
    for (int r = 0; r < ranks; ++r) {
      const int inner0 = double_binary_tree_links(ranks, r, 0).child_count() > 0;
      const int inner1 = double_binary_tree_links(ranks, r, 1).child_count() > 0;
      if (ranks % 2 == 0 || r != 0) {
        EXPECT_FALSE(inner0 && inner1) << "P=" << ranks << " rank " << r;
      }
    }
  }
  // NCCL's picture for P = 14.
  const TreeLinks eight = double_binary_tree_links(14, 8, 0);
  EXPECT_EQ(eight.parent, 0);
  EXPECT_EQ(eight.children[0], 4);
  EXPECT_EQ(eight.children[1], 12);
  const TreeLinks twelve = double_binary_tree_links(14, 12, 0);
  EXPECT_EQ(twelve.children[0], 10);
  EXPECT_EQ(twelve.children[1], 13);
  EXPECT_EQ(double_binary_tree_height(14), 4);
}

}  // namespace
}  // namespace dtrain::comm
