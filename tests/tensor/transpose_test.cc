// tensor::transpose against the index definition, with padded strides on both sides.
#include "dtrain/tensor/transpose.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace dtrain::tensor {
namespace {

TEST(Transpose, MovesEveryElementAndLeavesPaddingAlone) {
  for (const auto& [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1},
                                   {1, 9},
                                   {7, 1},
                                   {3, 5},
                                   {64, 256},
                                   {257, 33}}) {
    SCOPED_TRACE(::testing::Message() << rows << " x " << cols);
    const std::int64_t ld_src = cols + 2, ld_dst = rows + 3;
    std::vector<float> src(static_cast<std::size_t>(rows * ld_src));
    for (std::size_t i = 0; i < src.size(); ++i) src[i] = 0.5f * static_cast<float>(i) - 3.0f;
    std::vector<float> dst(static_cast<std::size_t>(cols * ld_dst), -7.0f);
    transpose(rows, cols, src.data(), ld_src, dst.data(), ld_dst);
    for (std::int64_t c = 0; c < cols; ++c) {
      for (std::int64_t r = 0; r < ld_dst; ++r) {
        const float got = dst[static_cast<std::size_t>(c * ld_dst + r)];
        if (r < rows) {
          ASSERT_EQ(got, src[static_cast<std::size_t>(r * ld_src + c)]) << c << ", " << r;
        } else {
          ASSERT_EQ(got, -7.0f) << "wrote padding at " << c << ", " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dtrain::tensor
