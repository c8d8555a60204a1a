#include "dtrain/base/dtype.h"

#include <array>
#include <string>

#include "dtrain/base/error.h"

namespace dtrain {
namespace {

struct DTypeInfo {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

constexpr std::array<DTypeInfo, 7> kDTypes{{{DType::kF32, "f32", 4},
                                            {DType::kF64, "f64", 8},
                                            {DType::kF16, "f16", 2},
                                            {DType::kBF16, "bf16", 2},
                                            {DType::kI32, "i32", 4},
                                            {DType::kI64, "i64", 8},
                                            {DType::kU8, "u8", 1}}};

const DTypeInfo& info(DType dtype) {
  for (const auto& entry : kDTypes) {
    if (entry.dtype == dtype) return entry;
  }
  throw InternalError("unknown DType value");
}

}  // namespace

std::size_t dtype_size(DType dtype) { return info(dtype).size; }
std::string_view dtype_name(DType dtype) { return info(dtype).name; }

DType parse_dtype(std::string_view name) {
  std::string accepted;
  for (const auto& entry : kDTypes) {
    if (entry.name == name) return entry.dtype;
    accepted += accepted.empty() ? "" : ", ";
    accepted += entry.name;
  }
  throw ConfigError(fmt::format("unknown dtype '{}'; accepted: {}", name, accepted));
}

}  // namespace dtrain
