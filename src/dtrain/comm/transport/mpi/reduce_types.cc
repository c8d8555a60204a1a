#include "dtrain/comm/transport/mpi/reduce_types.h"

#include <array>
#include <mutex>

#include "dtrain/base/error.h"

namespace dtrain::comm::mpi {
namespace {

template <DType kDType, ReduceOp kOp>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype* /*type*/) {
  reduce_into(inout, in, *length, kDType, kOp);
}

// [0]: f16, [1]: bf16; then sum, prod, min, max.
std::array<std::array<MPI_Op, 4>, 2> half_ops;
std::once_flag half_ops_once;

void create_half_ops() {
  const std::array<std::array<MPI_User_function*, 4>, 2> functions{{
      {reduce_16bit<DType::kF16, ReduceOp::kSum>, reduce_16bit<DType::kF16, ReduceOp::kProd>,
       reduce_16bit<DType::kF16, ReduceOp::kMin>, reduce_16bit<DType::kF16, ReduceOp::kMax>},
      {reduce_16bit<DType::kBF16, ReduceOp::kSum>, reduce_16bit<DType::kBF16, ReduceOp::kProd>,
       reduce_16bit<DType::kBF16, ReduceOp::kMin>, reduce_16bit<DType::kBF16, ReduceOp::kMax>},
  }};
  for (std::size_t t = 0; t < 2; ++t) {
    for (std::size_t o = 0; o < 4; ++o) {
      check(MPI_Op_create(functions[t][o], 1, &half_ops[t][o]), "MPI_Op_create", "mpi transport");
    }
  }
}

std::size_t op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return 0;
    case ReduceOp::kProd: return 1;
    case ReduceOp::kMin: return 2;
    case ReduceOp::kMax: return 3;
  }
  throw InternalError("mpi transport: unknown ReduceOp");
}

}  // namespace

MPI_Datatype datatype_of(DType dtype) {
  switch (dtype) {
    case DType::kF32: return MPI_FLOAT;
    case DType::kF64: return MPI_DOUBLE;
    case DType::kF16:
    case DType::kBF16: return MPI_UINT16_T;
    case DType::kI32: return MPI_INT32_T;
    case DType::kI64: return MPI_INT64_T;
    case DType::kU8: return MPI_UINT8_T;
  }
  throw InternalError("mpi transport: unknown DType");
}

MPI_Op op_of(ReduceOp op, DType dtype) {
  const std::size_t index = op_index(op);
  if (dtype == DType::kF16 || dtype == DType::kBF16) {
    std::call_once(half_ops_once, create_half_ops);
    return half_ops[dtype == DType::kF16 ? 0 : 1][index];
  }
  static const std::array<MPI_Op, 4> predefined = {MPI_SUM, MPI_PROD, MPI_MIN, MPI_MAX};
  return predefined[index];
}

}  // namespace dtrain::comm::mpi
