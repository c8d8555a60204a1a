// One posted send or receive of the in-process transport (private to inproc/), shared by the
// request that owns it, the lane queue it waits in, and the partner it was matched with.
//
// Lifetime: an intrusive reference count. The request holds one reference; a match makes each
// op hold one on its partner (released by the owner's request when it is destroyed); a buffered
// small send is also held by its queue until a receive or an abort takes it out.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/reduce_op.h"

namespace dtrain::comm::inproc {

// Messages of at most this many bytes are copied into the queue when no receive waits yet, so
// the send completes at once (InprocWorld::kEagerBytes).
inline constexpr std::size_t kEagerBytes = 256;

enum class OpState : int {
  kPending = 0,  // in a lane queue, or taken out by a thread that transfers it right away
  kMatched = 1,  // matched, `partner` set; the first of the two owners to wait will transfer
  kCopying = 2,  // receives only: a thread has claimed the transfer and is moving the bytes
  kDone = 3,
  kFailed = 4,  // `error` says why
};

struct PendingOp {
  bool is_send = false;
  // A receive that reduces the message into `recv_data` (irecv_reduce) instead of copying it.
  bool reduce = false;
  // A small send queued with a copy of its bytes in `eager`: complete for its owner, and held by
  // its queue until a receive takes it.
  bool buffered = false;
  // Guarded by the lane lock: the op is linked into its lane's send or receive list.
  bool queued = false;
  DType dtype = DType::kU8;
  ReduceOp reduce_op = ReduceOp::kSum;
  int source = 0;  // the sending rank
  int dest = 0;    // the receiving rank
  std::uint64_t tag = 0;
  // A send: its number in the (source, dest) pair's sequence, shared with the fast box
  // (fast_box.h): FIFO per (source, tag) across both paths compares these.
  std::uint64_t number = 0;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  // A send: the message size. A receive: the buffer capacity.
  std::size_t bytes = 0;

  std::atomic<OpState> state{OpState::kPending};
  std::atomic<int> references{1};
  // Set under the lane lock before the state becomes kMatched; afterwards read only by this op's
  // owner (its waits and its request's destructor).
  PendingOp* partner = nullptr;
  // Intrusive links of the lane list, guarded by the lane lock.
  PendingOp* prev = nullptr;
  PendingOp* next = nullptr;
  // Written before the state becomes kFailed; read after seeing kFailed.
  std::string error;
  // The bytes of a buffered small send; send_data then points here.
  std::array<std::byte, kEagerBytes> eager;

  // The rank whose thread waits on this op: the sender for a send, the receiver for a receive.
  int owner() const { return is_send ? source : dest; }
};

inline void retain(PendingOp* op) { op->references.fetch_add(1, std::memory_order_relaxed); }

inline void release(PendingOp* op) {
  if (op->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete op;
}

}  // namespace dtrain::comm::inproc
