#include "dtrain/parallel/process_grid.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::parallel {

int GridShape::extent(GridAxis axis) const {
  switch (axis) {
    case GridAxis::kData: return dp;
    case GridAxis::kTensor: return tp;
    case GridAxis::kPipeline: return pp;
    case GridAxis::kSpatial: return sp;
  }
  return 1;
}

int GridCoords::at(GridAxis axis) const {
  switch (axis) {
    case GridAxis::kData: return dp;
    case GridAxis::kTensor: return tp;
    case GridAxis::kPipeline: return pp;
    case GridAxis::kSpatial: return sp;
  }
  return 0;
}

const char* grid_axis_name(GridAxis axis) {
  switch (axis) {
    case GridAxis::kData: return "dp";
    case GridAxis::kTensor: return "tp";
    case GridAxis::kPipeline: return "pp";
    case GridAxis::kSpatial: return "sp";
  }
  return "?";
}

std::array<GridAxis, 4> parse_grid_order(std::string_view text, std::string_view key) {
  if (text == "tp-dp-pp") {
    return {GridAxis::kTensor, GridAxis::kSpatial, GridAxis::kData, GridAxis::kPipeline};
  }
  if (text == "tp-pp-dp") {
    return {GridAxis::kTensor, GridAxis::kSpatial, GridAxis::kPipeline, GridAxis::kData};
  }
  throw ConfigError(fmt::format(
      "{} = \"{}\" is not a grid order; accepted: tp-dp-pp (Megatron-LM), tp-pp-dp", key, text));
}

std::string grid_order_name(const std::array<GridAxis, 4>& order) {
  std::string name;
  for (const GridAxis axis : order) {
    if (axis == GridAxis::kSpatial) continue;
    if (!name.empty()) name += '-';
    name += grid_axis_name(axis);
  }
  return name;
}

std::string grid_product_text(std::int64_t dp, std::int64_t sp, std::int64_t tp, std::int64_t pp,
                              std::string_view prefix) {
  if (sp != 1) {
    return fmt::format("{0}dp x sp x tp x pp = {1} x {2} x {3} x {4} = {5}", prefix, dp, sp, tp, pp,
                       dp * sp * tp * pp);
  }
  return fmt::format("{0}dp x tp x pp = {1} x {2} x {3} = {4}", prefix, dp, tp, pp, dp * tp * pp);
}

void check_grid(const GridShape& shape, int ranks) {
  if (shape.dp < 1 || shape.tp < 1 || shape.pp < 1 || shape.sp < 1 || shape.size() != ranks) {
    throw ConfigError(fmt::format(
        "the grid {} does not match the {} ranks of this run; choose --dp, {}--tp and --pp whose "
        "product is the number of ranks (threads: they set it; mpirun: -np x parallel.workers)",
        grid_product_text(shape.dp, shape.sp, shape.tp, shape.pp), ranks,
        shape.sp != 1 ? "--sp, " : ""));
  }
}

GridCoords grid_coords(const GridShape& shape, int rank) {
  GridCoords coords;
  int rest = rank;
  for (const GridAxis axis : shape.order) {
    const int extent = shape.extent(axis);
    const int index = rest % extent;
    rest /= extent;
    switch (axis) {
      case GridAxis::kData: coords.dp = index; break;
      case GridAxis::kTensor: coords.tp = index; break;
      case GridAxis::kPipeline: coords.pp = index; break;
      case GridAxis::kSpatial: coords.sp = index; break;
    }
  }
  return coords;
}

int grid_rank(const GridShape& shape, const GridCoords& coords) {
  int rank = 0;
  int stride = 1;
  for (const GridAxis axis : shape.order) {
    rank += coords.at(axis) * stride;
    stride *= shape.extent(axis);
  }
  return rank;
}

namespace {

// The rank with this one's coordinates except index 0 on `axis`: one id per group along `axis`.
int group_color(const GridShape& shape, GridCoords coords, GridAxis axis) {
  switch (axis) {
    case GridAxis::kData: coords.dp = 0; break;
    case GridAxis::kTensor: coords.tp = 0; break;
    case GridAxis::kPipeline: coords.pp = 0; break;
    case GridAxis::kSpatial: coords.sp = 0; break;
  }
  return grid_rank(shape, coords);
}

}  // namespace

std::vector<std::vector<int>> grid_groups(const GridShape& shape, GridAxis axis) {
  std::vector<std::vector<int>> groups;
  std::vector<int> color_of_group;
  for (int rank = 0; rank < shape.size(); ++rank) {
    const GridCoords c = grid_coords(shape, rank);
    const int color = group_color(shape, c, axis);
    auto it = std::find(color_of_group.begin(), color_of_group.end(), color);
    if (it == color_of_group.end()) {
      color_of_group.push_back(color);
      groups.emplace_back(static_cast<std::size_t>(shape.extent(axis)), -1);
      it = color_of_group.end() - 1;
    }
    groups[static_cast<std::size_t>(it - color_of_group.begin())]
          [static_cast<std::size_t>(c.at(axis))] = rank;
  }
  return groups;
}

std::string groups_text(const std::vector<std::vector<int>>& groups) {
  std::string text;
  for (const auto& group : groups) {
    if (!text.empty()) text += ' ';
    text += '{';
    for (std::size_t i = 0; i < group.size(); ++i) {
      if (i > 0) text += ',';
      text += std::to_string(group[i]);
    }
    text += '}';
  }
  return text;
}

ProcessGrid::ProcessGrid(comm::Communicator& world, const GridShape& shape)
    : world_(world), shape_(shape) {
  check_grid(shape_, world.size());
  coords_ = grid_coords(shape_, world.rank());
  // Ordered by the index on the axis, so each group's rank is that index.
  data_ = world.split(group_color(shape_, coords_, GridAxis::kData), coords_.dp);
  tensor_ = world.split(group_color(shape_, coords_, GridAxis::kTensor), coords_.tp);
  pipeline_ = world.split(group_color(shape_, coords_, GridAxis::kPipeline), coords_.pp);
  spatial_ = world.split(group_color(shape_, coords_, GridAxis::kSpatial), coords_.sp);
  DTRAIN_CHECK_EQ(data_->rank(), coords_.dp);
  DTRAIN_CHECK_EQ(tensor_->rank(), coords_.tp);
  DTRAIN_CHECK_EQ(pipeline_->rank(), coords_.pp);
  DTRAIN_CHECK_EQ(spatial_->rank(), coords_.sp);
}

comm::Communicator& ProcessGrid::group(GridAxis axis) {
  switch (axis) {
    case GridAxis::kData: return *data_;
    case GridAxis::kTensor: return *tensor_;
    case GridAxis::kPipeline: return *pipeline_;
    case GridAxis::kSpatial: return *spatial_;
  }
  return *data_;
}

std::vector<std::string> ProcessGrid::describe() const {
  // The axes of the rank formula, fastest first; the spatial axis only when it is split, so that
  // a grid without it prints as before.
  std::array<GridAxis, 4> axes{};
  std::size_t n = 0;
  for (const GridAxis axis : shape_.order) {
    if (axis != GridAxis::kSpatial || shape_.sp > 1) axes[n++] = axis;
  }
  std::string formula = fmt::format("index along {}", grid_axis_name(axes[n - 1]));
  for (std::size_t i = n - 1; i-- > 0;) {
    // "a + A x index along b" innermost, "a + A x (...)" around a sum.
    const bool sum = i + 2 < n;
    formula = fmt::format("index along {} + {} x {}{}{}", grid_axis_name(axes[i]),
                          shape_.extent(axes[i]), sum ? "(" : "", formula, sum ? ")" : "");
  }
  const std::string shape_text =
      shape_.sp > 1 ? fmt::format("dp x sp x tp x pp = {} x {} x {} x {}", shape_.dp, shape_.sp,
                                  shape_.tp, shape_.pp)
                    : fmt::format("dp x tp x pp = {} x {} x {}", shape_.dp, shape_.tp, shape_.pp);
  std::vector<std::string> lines{fmt::format("grid: {} on {} ranks, order {} (rank = {})",
                                             shape_text, shape_.size(),
                                             grid_order_name(shape_.order), formula)};
  for (const GridAxis axis :
       {GridAxis::kTensor, GridAxis::kSpatial, GridAxis::kPipeline, GridAxis::kData}) {
    if (shape_.extent(axis) == 1) continue;
    const char* what = axis == GridAxis::kTensor     ? "tensor groups"
                       : axis == GridAxis::kSpatial  ? "spatial groups (rows split, top band first)"
                       : axis == GridAxis::kPipeline ? "pipeline groups (stage 0 first)"
                                                     : "data groups";
    lines.push_back(fmt::format("grid: {} {}", what, groups_text(grid_groups(shape_, axis))));
  }
  return lines;
}

}  // namespace dtrain::parallel
