// nn::GroupComm over a comm::Communicator: the one implementation of layer communication, written
// once over comm/'s collectives and point-to-point calls (their deadlines and named stalls
// included).
#pragma once

#include <cstdint>

#include "dtrain/comm/communicator.h"
#include "dtrain/nn/group_comm.h"

namespace dtrain::parallel {

class CommGroup final : public nn::GroupComm {
 public:
  // `comm` must outlive this group; `options` go with every collective (the header check, the
  // timeout); its algorithm, an allreduce's (parallel.allreduce), with the allreduces only.
  explicit CommGroup(comm::Communicator& comm, comm::CollectiveOptions options = {})
      : comm_(comm), options_(std::move(options)) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void allreduce_sum(double* values, std::int64_t count) override;
  void allreduce_sum(float* values, std::int64_t count) override;
  void allgather(const float* mine, float* all, std::int64_t count) override;
  // The lower rank sends first, the higher receives first, so the pair never waits on each other
  // however the transport buffers.
  void exchange(int peer, const float* send, std::int64_t send_count, float* recv,
                std::int64_t recv_count) override;

 private:
  comm::Communicator& comm_;
  comm::CollectiveOptions options_;
};

}  // namespace dtrain::parallel
