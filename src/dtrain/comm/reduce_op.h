// Reduction operators over raw typed buffers, the arithmetic inside every reducing collective.
#pragma once

#include <cstdint>
#include <string_view>

#include "dtrain/base/dtype.h"

namespace dtrain::comm {

// kAvg reduces as kSum; the collective divides by the number of ranks once at the end
// (divide_by), so every algorithm needs only the four associative operators.
enum class ReduceOp { kSum, kAvg, kProd, kMin, kMax };

// "sum", "avg", "prod", "min", "max".
std::string_view reduce_op_name(ReduceOp op);
// The inverse of reduce_op_name; throws ConfigError naming the accepted names.
ReduceOp parse_reduce_op(std::string_view name);

// acc[i] = acc[i] (op) in[i] for i in [0, count). One pass, count x (2 reads + 1 write); f16 and
// bf16 go through float and round to nearest even. acc and in must not overlap partially.
void reduce_into(void* acc, const void* in, std::int64_t count, DType dtype, ReduceOp op);

// data[i] = data[i] / divisor (the last step of kAvg): floats divide in their own precision (f16
// and bf16 through float), integers truncate toward zero.
void divide_by(void* data, std::int64_t count, DType dtype, int divisor);

}  // namespace dtrain::comm
