// GroupComm: what a layer that talks to other ranks needs from them (synchronized batch norm
// today; tensor-parallel linear layers, spatial halo exchange and pipeline stages next). nn/
// declares it and parallel/ implements it over comm::Communicator (parallel/comm_group.h), so
// layers stay free of comm/ (docs/ARCHITECTURE.md, "Layers").
//
// Every call is collective over the group (or, for exchange, between the two peers) and blocking,
// in the same order on every rank, which is what keeps layer-issued communication in step across
// ranks: layers call it in layer order on every rank alike.
#pragma once

#include <cstdint>

namespace dtrain::nn {

class GroupComm {
 public:
  virtual ~GroupComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // values (count): the element-wise sum over the group's ranks, in place.
  virtual void allreduce_sum(double* values, std::int64_t count) = 0;
  virtual void allreduce_sum(float* values, std::int64_t count) = 0;
  // mine (count) -> all (size() x count): rank r's block at r x count, the same on every rank.
  virtual void allgather(const float* mine, float* all, std::int64_t count) = 0;
  // Sends send (send_count) to `peer` and receives recv (recv_count) from it: a neighbour
  // exchange (halo rows, pipeline activations). Both peers call it with each other's rank.
  virtual void exchange(int peer, const float* send, std::int64_t send_count, float* recv,
                        std::int64_t recv_count) = 0;
};

}  // namespace dtrain::nn
