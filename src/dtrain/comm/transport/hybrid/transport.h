// Ranks that are threads of several processes: `--workers W` under `mpirun -np N` is N x W ranks.
// Global rank g = process x W + thread. A message between two threads of one process goes through
// the process's inproc world (one copy, no system call); a message between processes goes through
// MPI, over a transport of its own for each (sender thread, receiver thread) pair, so that messages
// of different thread pairs can never match each other whatever their tags.
//
// Cost: W^2 duplicated MPI communicators per process (W <= 16 in practice). native_allreduce is
// not available (no single MPI communicator spans the N x W ranks).
#pragma once

#include <memory>
#include <vector>

#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class HybridTransport : public Transport {
 public:
  // local: this thread's endpoint of the process's inproc world of W ranks (rank = thread index);
  // links[s][d]: the process-level transport (N ranks, rank = process index) carrying messages
  // from thread s of any process to thread d of any other; the same W x W table on every thread.
  HybridTransport(std::shared_ptr<Transport> local,
                  std::vector<std::vector<std::shared_ptr<Transport>>> links);

  int rank() const override { return process_ * threads_ + thread_; }
  int size() const override { return processes_ * threads_; }
  std::string_view name() const override { return "hybrid"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override;
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override;

 private:
  void check_peer(int peer) const;

  std::shared_ptr<Transport> local_;
  std::vector<std::vector<std::shared_ptr<Transport>>> links_;
  int thread_ = 0;
  int threads_ = 1;
  int process_ = 0;
  int processes_ = 1;
};

}  // namespace dtrain::comm
