// The shared state of an in-process world: n ranks that are threads of one process. Each rank
// gets an InprocTransport from transport(rank); all of them match messages through the mailboxes
// here.
//
// Data path: a message of more than kEagerBytes moves with ONE copy, done by whichever side
// arrives second: the receiver copies straight out of the sender's buffer (or the sender straight
// into the posted receive buffer), and the send completes when that copy is done. A message of at
// most kEagerBytes is copied into the queue at post time so the send completes at once. Matching
// takes one mutex per destination rank; waiting spins with the pause instruction and then sleeps
// on a per-rank condition variable, so the fast path makes no system call.
//
// Failure: abort(rank, reason) marks a rank as gone (it threw, or its function returned). Every
// pending operation that waits on it fails at once, and so does every later one, with an error
// naming the rank and the reason; small messages it had already sent stay deliverable.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/transport/inproc/pending_op.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocWorld : public std::enable_shared_from_this<InprocWorld> {
 public:
  static constexpr std::size_t kEagerBytes = 256;

  // A world of `size` ranks (>= 1); ConfigError otherwise.
  static std::shared_ptr<InprocWorld> create(int size);

  int size() const { return size_; }
  // Rank `rank`'s endpoint; may be called more than once (all share the same mailboxes).
  std::shared_ptr<Transport> transport(int rank);
  // Marks `rank` as failed or exited; idempotent (the first reason is kept).
  void abort(int rank, const std::string& reason);
  // The reason `rank` was aborted, if it was.
  std::optional<std::string> abort_reason(int rank) const;

  // Used by InprocTransport and InprocRequest.
  void post(const std::shared_ptr<inproc::PendingOp>& op);
  void cancel(const std::shared_ptr<inproc::PendingOp>& op);
  void wait(const inproc::PendingOp& op, std::chrono::steady_clock::time_point deadline);

  explicit InprocWorld(int size);  // use create()

 private:
  using Key = std::pair<int, std::uint64_t>;  // (source rank, tag)
  using Queue = std::deque<std::shared_ptr<inproc::PendingOp>>;
  // Unmatched operations addressed to one rank. For each key at most one of the two maps holds
  // entries: a receive that finds a queued send takes it, and the other way round.
  struct Mailbox {
    std::mutex mu;
    std::map<Key, Queue> sends;
    std::map<Key, Queue> recvs;
  };
  // Where a rank's waiting threads sleep after spinning.
  struct Waker {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> sleepers{0};
  };

  void post_send(const std::shared_ptr<inproc::PendingOp>& op);
  void post_recv(const std::shared_ptr<inproc::PendingOp>& op);
  // Copies the message of `send` into `recv` (both already out of their queues) and completes
  // both, or fails both when the message does not fit.
  void transfer(inproc::PendingOp& send, inproc::PendingOp& recv);
  void complete(inproc::PendingOp& op, inproc::OpState state);
  void fail(inproc::PendingOp& op, std::string error);
  std::string describe(const inproc::PendingOp& op) const;
  bool is_aborted(int rank) const { return aborted_[static_cast<std::size_t>(rank)].load(); }

  int size_;
  std::vector<Mailbox> mailboxes_;
  std::vector<Waker> wakers_;
  std::unique_ptr<std::atomic<bool>[]> aborted_;
  mutable std::mutex abort_mu_;
  std::vector<std::string> abort_reasons_;  // guarded by abort_mu_
};

}  // namespace dtrain::comm
