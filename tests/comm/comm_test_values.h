// Helpers of the comm tests: typed element access for raw buffers, the closed-form inputs each
// rank contributes, and the expected reductions computed naively from them.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/half.h"
#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm::testing {

inline constexpr DType kAllDTypes[] = {DType::kF32, DType::kF64, DType::kF16, DType::kBF16,
                                       DType::kI32, DType::kI64, DType::kU8};
inline constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kProd,
                                       ReduceOp::kMin, ReduceOp::kMax};

// Smaller sweeps when DTRAIN_TEST_QUICK is set (the ThreadSanitizer run).
inline bool quick_tests() {
  const char* value = std::getenv("DTRAIN_TEST_QUICK");
  return value != nullptr && std::string(value) != "0" && std::string(value) != "";
}

inline bool is_signed(DType dtype) { return dtype != DType::kU8; }

// Writes `value` (an integer small enough to be exact in every dtype) as element i.
inline void store(DType dtype, void* data, std::int64_t i, double value) {
  auto* bytes = static_cast<unsigned char*>(data) + static_cast<std::size_t>(i) * dtype_size(dtype);
  auto put = [&](auto typed) { std::memcpy(bytes, &typed, sizeof(typed)); };
  switch (dtype) {
    case DType::kF32: return put(static_cast<float>(value));
    case DType::kF64: return put(value);
    case DType::kF16: return put(float_to_f16(static_cast<float>(value)));
    case DType::kBF16: return put(float_to_bf16(static_cast<float>(value)));
    case DType::kI32: return put(static_cast<std::int32_t>(value));
    case DType::kI64: return put(static_cast<std::int64_t>(value));
    case DType::kU8: return put(static_cast<std::uint8_t>(value));
  }
}

inline double load(DType dtype, const void* data, std::int64_t i) {
  const auto* bytes =
      static_cast<const unsigned char*>(data) + static_cast<std::size_t>(i) * dtype_size(dtype);
  auto get = [&](auto typed) {
    std::memcpy(&typed, bytes, sizeof(typed));
    return typed;
  };
  switch (dtype) {
    case DType::kF32: return get(float{});
    case DType::kF64: return get(double{});
    case DType::kF16: return f16_to_float(get(std::uint16_t{}));
    case DType::kBF16: return bf16_to_float(get(std::uint16_t{}));
    case DType::kI32: return get(std::int32_t{});
    case DType::kI64: return static_cast<double>(get(std::int64_t{}));
    case DType::kU8: return get(std::uint8_t{});
  }
  return 0;
}

// Rank r's element i. Sum/avg/min/max: small integers in [-5, 5] ([0, 10] for u8), so sums over
// 16 ranks stay exact even in bf16 (|sum| <= 160 < 256). Prod: 2 at rank i mod P, 3 at rank
// (i + 1) mod P, -1 at rank (i + 2) mod P for signed types, 1 elsewhere: products in {2, 6, -6}.
inline double contribution(int rank, int ranks, std::int64_t i, DType dtype, ReduceOp op) {
  if (op == ReduceOp::kProd) {
    const int owner = static_cast<int>(i % ranks);
    if (rank == owner) return 2;
    if (ranks > 1 && rank == (owner + 1) % ranks) return 3;
    if (ranks > 2 && is_signed(dtype) && rank == (owner + 2) % ranks) return -1;
    return 1;
  }
  const double base = static_cast<double>((rank * 7 + i * 3) % 11);
  return is_signed(dtype) ? base - 5 : base;
}

// The reduction over ranks 0..P-1 of contribution(., i), in double (exact), then the avg division
// as the dtype does it: floats in their own precision, integers truncating toward zero.
inline double expected(int ranks, std::int64_t i, DType dtype, ReduceOp op) {
  double acc = contribution(0, ranks, i, dtype, op);
  for (int r = 1; r < ranks; ++r) {
    const double v = contribution(r, ranks, i, dtype, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg: acc += v; break;
      case ReduceOp::kProd: acc *= v; break;
      case ReduceOp::kMin: acc = v < acc ? v : acc; break;
      case ReduceOp::kMax: acc = v > acc ? v : acc; break;
    }
  }
  if (op != ReduceOp::kAvg) return acc;
  switch (dtype) {
    case DType::kF32: return static_cast<float>(acc) / static_cast<float>(ranks);
    case DType::kF64: return acc / ranks;
    case DType::kF16:
      return f16_to_float(float_to_f16(static_cast<float>(acc) / static_cast<float>(ranks)));
    case DType::kBF16:
      return bf16_to_float(float_to_bf16(static_cast<float>(acc) / static_cast<float>(ranks)));
    default: return static_cast<double>(static_cast<std::int64_t>(acc) / ranks);
  }
}

inline std::vector<unsigned char> make_buffer(std::int64_t count, DType dtype) {
  return std::vector<unsigned char>(static_cast<std::size_t>(count) * dtype_size(dtype) + 1);
}

inline void fill_contribution(std::vector<unsigned char>& buffer, int rank, int ranks,
                              std::int64_t count, DType dtype, ReduceOp op) {
  for (std::int64_t i = 0; i < count; ++i) {
    store(dtype, buffer.data(), i, contribution(rank, ranks, i, dtype, op));
  }
}

// Index of the first element that differs from expected(), or -1.
inline std::int64_t first_mismatch(const void* data, int ranks, std::int64_t count, DType dtype,
                                   ReduceOp op) {
  for (std::int64_t i = 0; i < count; ++i) {
    if (load(dtype, data, i) != expected(ranks, i, dtype, op)) return i;
  }
  return -1;
}

}  // namespace dtrain::comm::testing
