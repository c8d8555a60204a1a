// Rank `rank` of an InprocWorld: the Transport that collectives see when ranks are threads.
#pragma once

#include <memory>

#include "dtrain/comm/transport/inproc/pending_op.h"
#include "dtrain/comm/transport/inproc/world.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocTransport : public Transport, public std::enable_shared_from_this<InprocTransport> {
 public:
  InprocTransport(std::shared_ptr<InprocWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  std::string_view name() const override { return "inproc"; }
  bool shares_memory() const override { return true; }
  void keep_alive(std::shared_ptr<const void> storage) override {
    world_->keep_alive(std::move(storage));
  }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override;
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override;
  // Fused: the receiving side reduces straight from the sender's buffer into `data`, one pass
  // (2 reads + 1 write per byte) instead of a copy into a temporary and a reduce.
  std::unique_ptr<Request> irecv_reduce(int peer, std::uint64_t tag, void* data, std::size_t bytes,
                                        DType dtype, ReduceOp op) override;

 private:
  void check_peer(int peer, const char* what) const;
  std::unique_ptr<Request> post(inproc::PendingOp* op);
  // A receive of `bytes` from `peer` into `data` (irecv and irecv_reduce start from it).
  inproc::PendingOp* new_receive(int peer, std::uint64_t tag, void* data, std::size_t bytes) const;

  std::shared_ptr<InprocWorld> world_;
  int rank_;
};

}  // namespace dtrain::comm
