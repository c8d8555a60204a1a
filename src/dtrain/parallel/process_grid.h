// ProcessGrid: the ranks of a run arranged as data x spatial x tensor x pipeline (3D parallelism,
// as Megatron-LM's parallel_state and DeepSpeed's PipeDataParallelTopology do, with a spatial axis
// for image models), built once from communicator splits and passed explicitly to what trains on
// it.
//
// Layout. A rank's index is its coordinates in mixed radix, the first axis of `order` varying
// fastest. The default order tp-dp-pp is Megatron-LM's (its "tp-cp-ep-dp-pp" without context and
// expert parallelism): with dp = 2, tp = 2, pp = 2 on 8 ranks,
//   rank = tp_index + T (dp_index + D pp_index)
//   tensor groups   {0,1} {2,3} {4,5} {6,7}       adjacent ranks
//   data groups     {0,2} {1,3} {4,6} {5,7}       same (tp, pp), stride T
//   pipeline groups {0,4} {1,5} {2,6} {3,7}       same (tp, dp), stride T D
// Why this order: per step a tensor group exchanges 4 allreduces of the activations per block
// (forward and backward, on the critical path), a data group one allreduce of its stage's
// gradients (once, after the flush), a pipeline group only the activations at one cut; adjacent
// ranks share the fastest links (one socket, one host), so the heaviest traffic goes there.
// tp-pp-dp (data outermost: pipelines on adjacent ranks, replicas across hosts) is the other
// common choice (DeepSpeed's default) and is accepted.
//
// The spatial axis (sp: ranks that split each image's rows, strategies/spatial/) varies right after
// the tensor axis in either order, so it is on the fastest links too: a spatial group trades halo
// rows before every convolution and allreduces every batch norm's sums, forward and backward, on
// the critical path like a tensor group. With dp = 2, sp = 2 on 4 ranks (tp = pp = 1):
//   rank = sp_index + S dp_index;  spatial groups {0,1} {2,3}, data groups {0,2} {1,3}.
// The order names (tp-dp-pp, tp-pp-dp) stay those of the three other axes.
//
// Cost of building: four splits, each one allgather of 3 x i64 over the world.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::parallel {

enum class GridAxis { kData = 0, kTensor = 1, kPipeline = 2, kSpatial = 3 };

struct GridShape {
  int dp = 1;
  int tp = 1;
  int pp = 1;
  int sp = 1;
  // The axes from the fastest-varying to the slowest (spatial always second: see above).
  std::array<GridAxis, 4> order{GridAxis::kTensor, GridAxis::kSpatial, GridAxis::kData,
                                GridAxis::kPipeline};
  int size() const { return dp * tp * pp * sp; }
  int extent(GridAxis axis) const;
};

// "tp-dp-pp" | "tp-pp-dp" -> the order (the spatial axis second); ConfigError naming `key` and the
// accepted values.
std::array<GridAxis, 4> parse_grid_order(std::string_view text, std::string_view key);
// The order's name as parse_grid_order reads it (the spatial axis left out).
std::string grid_order_name(const std::array<GridAxis, 4>& order);
const char* grid_axis_name(GridAxis axis);  // "dp", "tp", "pp", "sp"

// "dp x tp x pp = 2 x 1 x 2 = 4", after `prefix` ("hybrid.dp x ..."); sp joins the product
// ("dp x sp x tp x pp = ...") only when it is not 1, as it joins the flags a user names.
std::string grid_product_text(std::int64_t dp, std::int64_t sp, std::int64_t tp, std::int64_t pp,
                              std::string_view prefix = "");
// ConfigError naming the numbers unless dp x tp x pp (x sp) == ranks (each >= 1).
void check_grid(const GridShape& shape, int ranks);

struct GridCoords {
  int dp = 0;
  int tp = 0;
  int pp = 0;
  int sp = 0;
  int at(GridAxis axis) const;
};
GridCoords grid_coords(const GridShape& shape, int rank);
int grid_rank(const GridShape& shape, const GridCoords& coords);

// The ranks of every group along `axis` (each group ordered by its index on that axis), groups in
// order of their smallest rank: for the banner and the tests.
std::vector<std::vector<int>> grid_groups(const GridShape& shape, GridAxis axis);
// "{0,2} {1,3}": groups as text.
std::string groups_text(const std::vector<std::vector<int>>& groups);

class ProcessGrid {
 public:
  // Collective over `world` (four splits); check_grid first, so every rank fails alike before
  // any traffic. `world` must outlive the grid.
  ProcessGrid(comm::Communicator& world, const GridShape& shape);

  const GridShape& shape() const { return shape_; }
  const GridCoords& coords() const { return coords_; }
  comm::Communicator& world() { return world_; }
  // This rank's group along each axis (rank there = its index on that axis).
  comm::Communicator& data() { return *data_; }
  comm::Communicator& tensor() { return *tensor_; }
  comm::Communicator& pipeline() { return *pipeline_; }
  comm::Communicator& spatial() { return *spatial_; }
  comm::Communicator& group(GridAxis axis);
  // Banner lines: the shape, the order, and the groups of each axis longer than one.
  std::vector<std::string> describe() const;

 private:
  comm::Communicator& world_;
  GridShape shape_;
  GridCoords coords_;
  std::unique_ptr<comm::Communicator> data_, tensor_, pipeline_, spatial_;
};

}  // namespace dtrain::parallel
