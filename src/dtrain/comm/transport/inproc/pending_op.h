// One posted send or receive of the in-process transport, shared by the request that owns it and
// the mailbox queue it waits in (private to inproc/).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::comm::inproc {

enum class OpState : int {
  kPending = 0,  // in a mailbox queue, waiting for its partner
  kMatched = 1,  // taken from the queue; the partner's thread is copying the bytes
  kDone = 2,
  kFailed = 3,  // `error` says why
};

struct PendingOp {
  bool is_send = false;
  int source = 0;  // the sending rank
  int dest = 0;    // the receiving rank
  std::uint64_t tag = 0;
  const void* send_data = nullptr;
  void* recv_data = nullptr;
  // A send: the message size. A receive: the buffer capacity.
  std::size_t bytes = 0;
  // A small send buffered at post time (bytes <= InprocWorld::kEagerBytes); send_data points here.
  std::vector<std::byte> eager;
  // True for the queued copy of a small send: nobody waits on it.
  bool buffered = false;
  std::atomic<OpState> state{OpState::kPending};
  // Written before state becomes kFailed; read after seeing kFailed.
  std::string error;

  // The rank whose thread waits on this op: the sender for a send, the receiver for a receive.
  int owner() const { return is_send ? source : dest; }
};

}  // namespace dtrain::comm::inproc
