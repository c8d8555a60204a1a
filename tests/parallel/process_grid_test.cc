// parallel::ProcessGrid: Megatron-LM's layout (tensor groups on adjacent ranks, then data, pipeline
// outermost) and the other order written out by hand for 2 x 2 x 2; the groups split on 8 thread
// ranks are those groups (an allreduce of world ranks over each sums exactly their members); a
// grid whose product is not the number of ranks is a ConfigError naming the numbers; the spatial
// axis sits next to the tensor axis.
#include "dtrain/parallel/process_grid.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::parallel {
namespace {

using Groups = std::vector<std::vector<int>>;

GridShape shape222(std::string_view order) {
  GridShape shape;
  shape.dp = 2;
  shape.tp = 2;
  shape.pp = 2;
  shape.order = parse_grid_order(order, "hybrid.order");
  return shape;
}

TEST(ProcessGrid, MegatronLayoutPutsTensorGroupsOnAdjacentRanks) {
  const GridShape megatron = shape222("tp-dp-pp");
  EXPECT_EQ(grid_groups(megatron, GridAxis::kTensor), (Groups{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(grid_groups(megatron, GridAxis::kData), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(grid_groups(megatron, GridAxis::kPipeline), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  const GridShape data_outer = shape222("tp-pp-dp");
  EXPECT_EQ(grid_groups(data_outer, GridAxis::kPipeline), (Groups{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(grid_groups(data_outer, GridAxis::kData), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  for (const GridShape& shape : {megatron, data_outer}) {
    for (int rank = 0; rank < 8; ++rank) {
      EXPECT_EQ(grid_rank(shape, grid_coords(shape, rank)), rank);
    }
  }
  EXPECT_EQ(groups_text(grid_groups(megatron, GridAxis::kData)), "{0,2} {1,3} {4,6} {5,7}");
  EXPECT_THROW(parse_grid_order("pp-dp-tp", "hybrid.order"), ConfigError);
}

TEST(ProcessGrid, SplitGroupsHoldExactlyTheirMembers) {
  const GridShape shape = shape222("tp-dp-pp");
  comm::spawn_ranks(8, [&](comm::Communicator& world) {
    ProcessGrid grid(world, shape);
    for (const GridAxis axis : {GridAxis::kData, GridAxis::kTensor, GridAxis::kPipeline}) {
      comm::Communicator& group = grid.group(axis);
      EXPECT_EQ(group.size(), 2);
      EXPECT_EQ(group.rank(), grid.coords().at(axis));
      // The sum of the members' world ranks, and the member list, against grid_groups.
      double sum = world.rank();
      group.allreduce(&sum, 1, DType::kF64, comm::ReduceOp::kSum);
      double expected = 0.0;
      for (const auto& members : grid_groups(shape, axis)) {
        bool mine = false;
        for (const int r : members) mine = mine || r == world.rank();
        if (!mine) continue;
        for (const int r : members) expected += r;
        EXPECT_EQ(members[static_cast<std::size_t>(group.rank())], world.rank());
      }
      EXPECT_EQ(sum, expected) << grid_axis_name(axis) << " rank " << world.rank();
    }
  });
}

TEST(ProcessGrid, AProductOtherThanTheRanksIsAConfigErrorNamingTheNumbers) {
  GridShape shape;
  shape.dp = 2;
  shape.pp = 2;
  try {
    check_grid(shape, 8);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("2 x 1 x 2 = 4"), std::string::npos) << what;
    EXPECT_NE(what.find("8 ranks"), std::string::npos) << what;
  }
  EXPECT_NO_THROW(check_grid(shape, 4));
}

// The spatial axis varies right after the tensor axis (both on adjacent ranks): dp 2 x sp 2 on 4
// ranks gives spatial groups {0,1} {2,3} and data groups {0,2} {1,3}; with a pipeline around
// (dp 2 x sp 2 x pp 2 on 8 ranks, the grid itself allows it) the split groups hold their members.
TEST(ProcessGrid, SpatialGroupsSitOnAdjacentRanks) {
  GridShape shape;
  shape.dp = 2;
  shape.sp = 2;
  EXPECT_EQ(grid_groups(shape, GridAxis::kSpatial), (Groups{{0, 1}, {2, 3}}));
  EXPECT_EQ(grid_groups(shape, GridAxis::kData), (Groups{{0, 2}, {1, 3}}));
  EXPECT_EQ(grid_order_name(shape.order), "tp-dp-pp");
  shape.pp = 2;
  EXPECT_EQ(grid_groups(shape, GridAxis::kPipeline), (Groups{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  comm::spawn_ranks(8, [&](comm::Communicator& world) {
    ProcessGrid grid(world, shape);
    EXPECT_EQ(grid.spatial().size(), 2);
    EXPECT_EQ(grid.spatial().rank(), grid.coords().sp);
    double sum = world.rank();
    grid.spatial().allreduce(&sum, 1, DType::kF64, comm::ReduceOp::kSum);
    // Rank 2k and 2k + 1 share a spatial group.
    EXPECT_EQ(sum, 4 * (world.rank() / 2) + 1) << world.rank();
    if (world.rank() == 0) {
      const std::vector<std::string> lines = grid.describe();
      ASSERT_GE(lines.size(), 1u);
      EXPECT_NE(lines[0].find("dp x sp x tp x pp = 2 x 2 x 1 x 2 on 8 ranks"), std::string::npos)
          << lines[0];
    }
  });
  try {
    check_grid(shape, 4);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("2 x 2 x 1 x 2 = 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::parallel
