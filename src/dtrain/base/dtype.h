// Element types that buffers and collectives carry.
#pragma once

#include <cstddef>
#include <string_view>

namespace dtrain {

enum class DType { kF32, kF64, kF16, kBF16, kI32, kI64, kU8 };

// Bytes per element: 4, 8, 2, 2, 4, 8, 1.
std::size_t dtype_size(DType dtype);
// "f32", "f64", "f16", "bf16", "i32", "i64", "u8".
std::string_view dtype_name(DType dtype);
// The inverse of dtype_name; throws ConfigError naming the accepted names.
DType parse_dtype(std::string_view name);

}  // namespace dtrain
