// Native allreduce: the whole call handed to the transport's own collective
// (Transport::native_allreduce: MPI_Allreduce for mpi), with the call's deadline. Transports that
// have none (inproc, and every sub-communicator's view) answer false, and the call fails with a
// ConfigError on every rank, naming the algorithms that do work there.
//
// Cost: whatever the transport's library picks (Open MPI switches between recursive doubling,
// Rabenseifner and ring by size); not modelled, so `auto` never chooses it.
#include <string>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_native(Channel& channel, void* data, std::int64_t count, DType dtype, ReduceOp op) {
  if (channel.transport().native_allreduce(data, count, dtype, op, channel.deadline())) return;
  std::string others;
  for (const auto& algorithm : allreduce_algorithms()) {
    if (algorithm.name == kNativeAllreduce) continue;
    others += others.empty() ? "" : ", ";
    others += algorithm.name;
  }
  throw ConfigError(fmt::format(
      "allreduce algorithm 'native' needs a transport with its own allreduce (mpi); transport "
      "'{}' has none: choose one of {}",
      channel.transport().name(), others));
}

}  // namespace dtrain::comm
