#include "dtrain/comm/reduce_op.h"

#include <algorithm>
#include <array>
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/comm/half.h"

namespace dtrain::comm {
namespace {

constexpr std::array<std::pair<ReduceOp, std::string_view>, 5> kOps{{{ReduceOp::kSum, "sum"},
                                                                     {ReduceOp::kAvg, "avg"},
                                                                     {ReduceOp::kProd, "prod"},
                                                                     {ReduceOp::kMin, "min"},
                                                                     {ReduceOp::kMax, "max"}}};

struct Sum {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a + b);
  }
};
struct Prod {
  template <typename T>
  T operator()(T a, T b) const {
    return static_cast<T>(a * b);
  }
};
struct Min {
  template <typename T>
  T operator()(T a, T b) const {
    return std::min(a, b);
  }
};
struct Max {
  template <typename T>
  T operator()(T a, T b) const {
    return std::max(a, b);
  }
};

// The tight loop the compiler vectorizes: plain element types, no aliasing between acc and in.
template <typename T, typename Fn>
void reduce_plain(void* acc_raw, const void* in_raw, std::int64_t count, Fn fn) {
  T* __restrict acc = static_cast<T*>(acc_raw);
  const T* __restrict in = static_cast<const T*>(in_raw);
  for (std::int64_t i = 0; i < count; ++i) acc[i] = fn(acc[i], in[i]);
}

// f16 / bf16: widen both sides to float, apply, round back to nearest even.
template <float (*kToFloat)(std::uint16_t), std::uint16_t (*kFromFloat)(float), typename Fn>
void reduce_half(void* acc_raw, const void* in_raw, std::int64_t count, Fn fn) {
  std::uint16_t* __restrict acc = static_cast<std::uint16_t*>(acc_raw);
  const std::uint16_t* __restrict in = static_cast<const std::uint16_t*>(in_raw);
  for (std::int64_t i = 0; i < count; ++i)
    acc[i] = kFromFloat(fn(kToFloat(acc[i]), kToFloat(in[i])));
}

template <typename Fn>
void reduce_typed(void* acc, const void* in, std::int64_t count, DType dtype, Fn fn) {
  switch (dtype) {
    case DType::kF32: return reduce_plain<float>(acc, in, count, fn);
    case DType::kF64: return reduce_plain<double>(acc, in, count, fn);
    case DType::kF16: return reduce_half<f16_to_float, float_to_f16>(acc, in, count, fn);
    case DType::kBF16: return reduce_half<bf16_to_float, float_to_bf16>(acc, in, count, fn);
    case DType::kI32: return reduce_plain<std::int32_t>(acc, in, count, fn);
    case DType::kI64: return reduce_plain<std::int64_t>(acc, in, count, fn);
    case DType::kU8: return reduce_plain<std::uint8_t>(acc, in, count, fn);
  }
  throw InternalError("reduce_into: unknown DType value");
}

template <typename T>
void divide_plain(void* raw, std::int64_t count, int divisor) {
  T* data = static_cast<T*>(raw);
  const T d = static_cast<T>(divisor);
  for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(data[i] / d);
}

template <float (*kToFloat)(std::uint16_t), std::uint16_t (*kFromFloat)(float)>
void divide_half(void* raw, std::int64_t count, int divisor) {
  std::uint16_t* data = static_cast<std::uint16_t*>(raw);
  const float d = static_cast<float>(divisor);
  for (std::int64_t i = 0; i < count; ++i) data[i] = kFromFloat(kToFloat(data[i]) / d);
}

}  // namespace

std::string_view reduce_op_name(ReduceOp op) {
  for (const auto& [value, name] : kOps) {
    if (value == op) return name;
  }
  throw InternalError("reduce_op_name: unknown ReduceOp value");
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (const auto& [value, op_name] : kOps) {
    if (op_name == name) return value;
  }
  throw ConfigError(
      fmt::format("unknown reduce op '{}': expected one of sum, avg, prod, min, max", name));
}

void reduce_into(void* acc, const void* in, std::int64_t count, DType dtype, ReduceOp op) {
  if (count <= 0) return;
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return reduce_typed(acc, in, count, dtype, Sum{});
    case ReduceOp::kProd: return reduce_typed(acc, in, count, dtype, Prod{});
    case ReduceOp::kMin: return reduce_typed(acc, in, count, dtype, Min{});
    case ReduceOp::kMax: return reduce_typed(acc, in, count, dtype, Max{});
  }
  throw InternalError("reduce_into: unknown ReduceOp value");
}

void divide_by(void* data, std::int64_t count, DType dtype, int divisor) {
  DTRAIN_CHECK_GT(divisor, 0);
  if (count <= 0 || divisor == 1) return;
  switch (dtype) {
    case DType::kF32: return divide_plain<float>(data, count, divisor);
    case DType::kF64: return divide_plain<double>(data, count, divisor);
    case DType::kF16: return divide_half<f16_to_float, float_to_f16>(data, count, divisor);
    case DType::kBF16: return divide_half<bf16_to_float, float_to_bf16>(data, count, divisor);
    case DType::kI32: return divide_plain<std::int32_t>(data, count, divisor);
    case DType::kI64: return divide_plain<std::int64_t>(data, count, divisor);
    case DType::kU8: return divide_plain<std::uint8_t>(data, count, divisor);
  }
  throw InternalError("divide_by: unknown DType value");
}

}  // namespace dtrain::comm
