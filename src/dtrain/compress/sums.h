// The reductions codecs need over a whole buffer (sign's mean |x|, QSGD's norm), in double.
//
// A plain `s += x[i]` loop is one dependent add per element (about 4 cycles), and the compiler may
// not reorder float additions to vectorize it. These keep 64 independent partial sums (lane j
// takes elements j, j + 64, ...), which the compiler turns into four independent vector
// accumulators (one would wait on its own add's latency), in float over blocks of 1024 elements
// (16 terms per lane) and in double across blocks; the lanes are added at the end. A fixed order,
// so the result depends only on the data; the relative error is about 16 x 2^-24 at worst. Bound:
// reads 4 B per element, one pass.
#pragma once

#include <cstdint>

namespace dtrain::compress {

// sum |x_i|
double sum_abs(const float* x, std::int64_t n);
// sum x_i^2
double sum_squares(const float* x, std::int64_t n);

}  // namespace dtrain::compress
