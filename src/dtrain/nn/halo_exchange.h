// Halo exchange: the boundary rows of a horizontal band of images swapped with the ranks that hold
// the bands above and below (spatial parallelism, seed 003; Jin, Ginsburg and Keutzer 2018).
//
// A tensor (planes, rows, width) is one band: rank r of P holds image rows [r h, (r + 1) h) of
// every plane (a plane is one channel of one image). A convolution with a K x K kernel, stride S
// and padding p computes output rows [r h / S, (r + 1) h / S) from input rows
// [r h - p, r h + h - S + K - p - 1]: it needs `top` = p rows above its band and `bottom` =
// max(0, K - p - S) rows below (3x3, stride 1, pad 1: 1 and 1; 3x3, stride 2, pad 1: 1 and 0;
// 1x1, stride 2, pad 0: none). Rank r sends its top `bottom` rows to rank r - 1 and its bottom
// `top` rows to rank r + 1, and receives theirs; the first and the last rank see the image's zero
// padding instead. Per exchange: 4 B C W (bottom to r - 1 + top to r + 1) bytes sent by rank r.
// In backward the same pairs swap the gradients of the halo rows the other way (top rows' to
// r - 1, bottom rows' to r + 1), which the receiver adds into its own boundary rows.
//
// Order: every pair of neighbours meets in one GroupComm::exchange (blocking). Two rounds keep
// every rank busy at once: in the first, each even rank trades with the rank below it (r + 1) and
// each odd rank with the rank above (r - 1), pairs (0,1), (2,3), ...; in the second the other
// pairs, (1,2), (3,4), .... Latency 2 alpha per exchange, whatever P. A pair with nothing to move
// either way (both counts 0) does not meet.
#pragma once

#include <cstdint>

#include "dtrain/nn/group_comm.h"

namespace dtrain::nn {

// Copies rows [row_begin, row_begin + row_count) of every plane of src (planes, rows, width) into
// dst (planes, row_count, width), contiguous.
void pack_rows(const float* src, std::int64_t planes, std::int64_t rows, std::int64_t width,
               std::int64_t row_begin, std::int64_t row_count, float* dst);

// dst (planes, rows, dst_width) rows [row_begin, row_begin + row_count), columns [column,
// column + width) += src (planes, row_count, width).
void add_rows(const float* src, std::int64_t planes, std::int64_t row_count, std::int64_t width,
              float* dst, std::int64_t rows, std::int64_t dst_width, std::int64_t row_begin,
              std::int64_t column);

// One side of an exchange with a neighbour: `send_count` floats out of `send`, `recv_count` into
// `recv` (either count may be 0; the pointers must then still be valid, e.g. a 1-float buffer).
struct HaloSide {
  const float* send = nullptr;
  std::int64_t send_count = 0;
  float* recv = nullptr;
  std::int64_t recv_count = 0;
};

// Trades `up` with rank - 1 and `down` with rank + 1 in the two rounds above; a neighbour that
// does not exist (rank 0 has none above, rank P - 1 none below) is skipped and its recv left
// untouched. Collective over the group: up's counts on rank r are down's, swapped, on rank r - 1.
void exchange_halos(GroupComm& group, const HaloSide& up, const HaloSide& down);

}  // namespace dtrain::nn
