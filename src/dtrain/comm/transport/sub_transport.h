// A view of some ranks of a Transport as a smaller world: what Communicator::split hands the
// sub-communicator it creates. Not a concrete transport (it moves no bytes itself), so it lives
// next to the abstract interface and works over every concrete one (inproc, mpi, ...).
//
// Ranks: sub-rank i is world rank members[i] of the underlying transport.
//
// Tags: the sub-communicator's traffic must never match its parent's or another sub-communicator's
// that shares a pair of world ranks. Every communicator has an id, 0 for the one over the world
// transport and 1 .. kMaxCommunicatorId for sub-communicators (agreed by all members at split
// time, Communicator::split). The id fills tag bits 47..62 (kCommunicatorIdShift); the
// communicator's own fields stay below (docs/COMM.md "Tags"):
//
//   bit 63          point-to-point flag
//   bits 47..62     communicator id (set here; always 0 in the tags a Communicator builds)
//   collectives:    bits 24..46 sequence number, 8..23 caller tag, 0..7 phase
//   point-to-point: bits 0..46 caller tag
//
// A view of a view is flattened into one view of the world transport (ranks composed, the newer
// id replacing the older), so a nested split costs no extra indirection and ids never stack.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

inline constexpr int kCommunicatorIdShift = 47;
inline constexpr std::uint64_t kMaxCommunicatorId = (std::uint64_t{1} << 16) - 1;
inline constexpr std::uint64_t kCommunicatorIdMask = kMaxCommunicatorId << kCommunicatorIdShift;

class SubTransport : public Transport {
 public:
  // members: the ranks of `parent` in this view, in sub-rank order (distinct, in range, and
  // containing `parent->rank()`); id in [1, kMaxCommunicatorId]. Throws ConfigError otherwise.
  static std::shared_ptr<SubTransport> create(std::shared_ptr<Transport> parent,
                                              const std::vector<int>& members, std::uint64_t id);

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(world_ranks_.size()); }
  // The world transport's name ("inproc", "mpi"): a view changes ranks, not how bytes move.
  std::string_view name() const override { return world_->name(); }
  bool shares_memory() const override { return world_->shares_memory(); }
  void keep_alive(std::shared_ptr<const void> storage) override {
    world_->keep_alive(std::move(storage));
  }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override;
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override;
  // Forwarded, so a sub-communicator keeps the world transport's fused receive-and-reduce.
  std::unique_ptr<Request> irecv_reduce(int peer, std::uint64_t tag, void* data, std::size_t bytes,
                                        DType dtype, ReduceOp op) override;
  // native_allreduce stays the default (false): the world transport's own allreduce spans all of
  // its ranks, not this subset.

  std::uint64_t id() const { return id_; }
  // World rank of sub-rank `rank`.
  int world_rank(int rank) const { return world_ranks_[static_cast<std::size_t>(rank)]; }

  SubTransport(std::shared_ptr<Transport> world, std::vector<int> world_ranks, int rank,
               std::uint64_t id);

 private:
  int to_world(int peer, const char* what) const;
  std::uint64_t world_tag(std::uint64_t tag) const;

  std::shared_ptr<Transport> world_;
  std::vector<int> world_ranks_;
  int rank_;
  std::uint64_t id_;
};

}  // namespace dtrain::comm
