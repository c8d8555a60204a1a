#include "dtrain/parallel/comm_group.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::parallel {

void CommGroup::allreduce_sum(double* values, std::int64_t count) {
  comm_.allreduce(values, count, DType::kF64, comm::ReduceOp::kSum, options_);
}

void CommGroup::allreduce_sum(float* values, std::int64_t count) {
  comm_.allreduce(values, count, DType::kF32, comm::ReduceOp::kSum, options_);
}

void CommGroup::allgather(const float* mine, float* all, std::int64_t count) {
  // The algorithm option names an allreduce (parallel.allreduce); allgather has one, ring.
  comm::CollectiveOptions options = options_;
  options.algorithm.clear();
  comm_.allgather(mine, all, count, DType::kF32, options);
}

void CommGroup::exchange(int peer, const float* send, std::int64_t send_count, float* recv,
                         std::int64_t recv_count) {
  if (peer < 0 || peer >= comm_.size() || peer == comm_.rank()) {
    throw InternalError(fmt::format("CommGroup::exchange: rank {} of {} cannot exchange with {}",
                                    comm_.rank(), comm_.size(), peer));
  }
  if (comm_.rank() < peer) {
    comm_.send(send, send_count, DType::kF32, peer);
    comm_.recv(recv, recv_count, DType::kF32, peer);
  } else {
    comm_.recv(recv, recv_count, DType::kF32, peer);
    comm_.send(send, send_count, DType::kF32, peer);
  }
}

}  // namespace dtrain::parallel
