// Halo exchange: the boundary rows of a horizontal band of images swapped with the ranks that hold
// the bands above and below (spatial parallelism, seed 003; Jin, Ginsburg and Keutzer 2018).
//
// A tensor (planes, rows, width) is one band: rank r of P holds image rows [r h, (r + 1) h) of
// every plane (a plane is one channel of one image). A convolution with a K x K kernel, stride 1,
// needs p = (K - 1) / 2 rows above and below its band: the "halo". Rank r sends its top p rows to
// rank r - 1 and its bottom p rows to rank r + 1, and receives theirs; the first and the last rank
// see the image's zero padding instead. Per exchange and neighbour: planes x p x width floats each
// way, i.e. 4 B C p W bytes sent per neighbour (interior ranks have two, the edges one).
// In backward the same pairs swap the gradients of the halo rows, which the receiver adds into its
// own boundary rows (the halo it sent was read by the neighbour's convolution).
//
// Order: every pair of neighbours meets in one GroupComm::exchange (blocking). Two rounds keep
// every rank busy at once: in the first, each even rank trades with the rank below it (r + 1) and
// each odd rank with the rank above (r - 1), pairs (0,1), (2,3), ...; in the second the other
// pairs, (1,2), (3,4), .... Latency 2 alpha per exchange, whatever P.
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

// Sends up_send (count floats) to rank - 1 and receives up_recv from it, sends down_send to
// rank + 1 and receives down_recv from it, in the two rounds above; a neighbour that does not
// exist (rank 0 has none above, rank P - 1 none below) is skipped and its recv left untouched.
// Collective over the group: every rank calls it with the same count.
void exchange_halos(GroupComm& group, const float* up_send, float* up_recv, const float* down_send,
                    float* down_recv, std::int64_t count);

}  // namespace dtrain::nn
