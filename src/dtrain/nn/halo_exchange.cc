#include "dtrain/nn/halo_exchange.h"

#include <algorithm>

namespace dtrain::nn {

void pack_rows(const float* src, std::int64_t planes, std::int64_t rows, std::int64_t width,
               std::int64_t row_begin, std::int64_t row_count, float* dst) {
  const std::int64_t block = row_count * width;
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    const float* from = src + (plane * rows + row_begin) * width;
    std::copy(from, from + block, dst + plane * block);
  }
}

void add_rows(const float* src, std::int64_t planes, std::int64_t row_count, std::int64_t width,
              float* dst, std::int64_t rows, std::int64_t dst_width, std::int64_t row_begin,
              std::int64_t column) {
  for (std::int64_t plane = 0; plane < planes; ++plane) {
    for (std::int64_t i = 0; i < row_count; ++i) {
      const float* from = src + (plane * row_count + i) * width;
      float* to = dst + (plane * rows + row_begin + i) * dst_width + column;
      for (std::int64_t j = 0; j < width; ++j) to[j] += from[j];
    }
  }
}

void exchange_halos(GroupComm& group, const HaloSide& up, const HaloSide& down) {
  const int rank = group.rank();
  const int size = group.size();
  const auto trade = [&](int peer, const HaloSide& side) {
    if (side.send_count == 0 && side.recv_count == 0) return;
    group.exchange(peer, side.send, side.send_count, side.recv, side.recv_count);
  };
  const auto with_above = [&] {
    if (rank > 0) trade(rank - 1, up);
  };
  const auto with_below = [&] {
    if (rank + 1 < size) trade(rank + 1, down);
  };
  if (rank % 2 == 0) {
    with_below();
    with_above();
  } else {
    with_above();
    with_below();
  }
}

}  // namespace dtrain::nn
