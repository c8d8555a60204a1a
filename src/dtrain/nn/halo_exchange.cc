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

void exchange_halos(GroupComm& group, const float* up_send, float* up_recv, const float* down_send,
                    float* down_recv, std::int64_t count) {
  const int rank = group.rank();
  const int size = group.size();
  const auto up = [&] {
    if (rank > 0) group.exchange(rank - 1, up_send, count, up_recv, count);
  };
  const auto down = [&] {
    if (rank + 1 < size) group.exchange(rank + 1, down_send, count, down_recv, count);
  };
  if (rank % 2 == 0) {
    down();
    up();
  } else {
    up();
    down();
  }
}

}  // namespace dtrain::nn
