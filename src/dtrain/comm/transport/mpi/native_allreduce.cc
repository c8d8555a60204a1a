// MpiTransport::native_allreduce: MPI's own allreduce (Open MPI's tuned algorithms over shared
// memory or the network), for the "native" allreduce algorithm. MPI_Iallreduce rather than
// MPI_Allreduce so that the call can be polled against its deadline.
#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/mpi/reduce_types.h"
#include "dtrain/comm/transport/mpi/request.h"
#include "dtrain/comm/transport/mpi/transport.h"

namespace dtrain::comm {

bool MpiTransport::native_allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op,
                                    std::chrono::steady_clock::time_point deadline) {
  const MPI_Datatype type = mpi::datatype_of(dtype);
  const MPI_Op mpi_op = mpi::op_of(op, dtype);
  const std::size_t element = dtype_size(dtype);
  const auto describe = [&] {
    return fmt::format("rank {}: native allreduce (MPI_Iallreduce of {} x {}, {})", rank_, count,
                       dtype_name(dtype), reduce_op_name(op));
  };
  // Collectives on one MPI communicator match by call order: one at a time per process.
  std::lock_guard<std::mutex> lock(native_mu_);
  if (native_broken_) {
    throw CommError(fmt::format(
        "{}: an earlier native allreduce on this transport did not complete before its deadline "
        "and cannot be cancelled; create a new transport (mpi_world_transport) or end the process",
        describe()));
  }
  // MPI counts are ints: larger buffers go in chunks of 2^30 elements.
  constexpr std::int64_t kChunk = std::int64_t{1} << 30;
  for (std::int64_t offset = 0; offset < count; offset += kChunk) {
    const std::int64_t n = std::min(kChunk, count - offset);
    void* chunk = static_cast<std::byte*>(data) + static_cast<std::size_t>(offset) * element;
    MPI_Request request = MPI_REQUEST_NULL;
    mpi::check(
        MPI_Iallreduce(MPI_IN_PLACE, chunk, static_cast<int>(n), type, mpi_op, native_, &request),
        "MPI_Iallreduce", describe());
    int code = MPI_SUCCESS;
    const bool done = mpi::poll_until(
        [&] {
          int flag = 0;
          code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
          return code != MPI_SUCCESS || flag != 0;
        },
        deadline);
    if (!done) {
      // MPI forbids cancelling or freeing a pending collective: the request stays pending, and
      // MPI may still write into `data` if the missing ranks arrive.
      native_broken_ = true;
      throw CommTimeoutError(fmt::format(
          "{} did not complete before its deadline: some rank did not call it (MPI does not say "
          "which; the communicator's header check, on by default, names missing ranks)",
          describe()));
    }
    mpi::check(code, "MPI_Iallreduce", describe());
  }
  return true;
}

}  // namespace dtrain::comm
