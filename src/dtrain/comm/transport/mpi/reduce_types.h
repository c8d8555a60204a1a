// dtrain's dtypes and reduce ops as MPI datatypes and MPI_Ops, for the native MPI_Iallreduce
// (private to transport/mpi/). f32, f64, i32, i64 and u8 use MPI's predefined types and ops. MPI
// has no f16 or bf16: they travel as MPI_UINT16_T with one user-defined, commutative MPI_Op per
// (dtype, op) that reduces through float and rounds to nearest even (reduce_into), exactly as
// dtrain's own algorithms do, so "native" gives the same bits for them.
#pragma once

#include "dtrain/base/dtype.h"
#include "dtrain/comm/reduce_op.h"
#include "dtrain/comm/transport/mpi/mpi_api.h"

namespace dtrain::comm::mpi {

MPI_Datatype datatype_of(DType dtype);
// kAvg is reduced as kSum (the caller divides). Creates the f16/bf16 ops on first use.
MPI_Op op_of(ReduceOp op, DType dtype);

}  // namespace dtrain::comm::mpi
