// The shared state of an in-process world: n ranks that are threads of one process. Each rank
// gets an InprocTransport from transport(rank); all of them match messages through the lanes
// here. docs/INPROC.md gives the design and the measured figures.
//
// Matching: one lane per (destination, source) pair holds that pair's unmatched sends and
// receives in two intrusive FIFO lists under a spin lock, so posting allocates nothing beyond
// the op itself and two pairs of ranks never touch the same lock.
//
// Data path: a message of more than kEagerBytes moves with ONE pass over the bytes: the receiver
// copies (or, for irecv_reduce, reduces) straight out of the sender's buffer into its own.
// Which thread moves the bytes: at most kCopyOnMatchBytes, the thread that posts second, at once;
// larger, the first of the two owners to wait on (or test, or cancel) either op claims the
// transfer with one compare-and-swap, so in a symmetric exchange every rank moves its own
// incoming bytes in parallel, and a rank waiting on its send still makes progress on its own. A
// message of at most kEagerBytes is copied into the queue when no receive waits yet, so the send
// completes at once.
//
// Small messages (at most inproc::kFastBytes) skip the lanes when they can: the sender publishes
// them in the pair's fast box (fast_box.h), one cache line, and completes at once; receives look
// there as well as in the lane (settle) and their waiters poll it. Every send of a pair takes a
// number from the box, so FIFO per (source, tag) holds across both paths.
//
// Waiting spins on the op's state with the pause instruction for up to 100 us (not at all when
// the peer's thread last ran on this CPU), then sleeps on a per-rank condition variable until its
// deadline (matchers and completers notify only when someone sleeps), so the fast path makes no
// system call.
//
// Failure: abort(rank, reason) marks a rank as gone (it threw, or its function returned). Every
// pending operation that waits on it fails at once, and so does every later one, with an error
// naming the rank and the reason; small messages it had already sent stay deliverable.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/transport/inproc/fast_box.h"
#include "dtrain/comm/transport/inproc/pending_op.h"
#include "dtrain/comm/transport/inproc/spin_lock.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocWorld : public std::enable_shared_from_this<InprocWorld> {
 public:
  static constexpr std::size_t kEagerBytes = inproc::kEagerBytes;
  // Larger rendezvous messages are moved by the first owner to wait, not by the poster.
  static constexpr std::size_t kCopyOnMatchBytes = std::size_t{64} << 10;

  // A world of `size` ranks (>= 1); ConfigError otherwise.
  static std::shared_ptr<InprocWorld> create(int size);
  ~InprocWorld();
  InprocWorld(const InprocWorld&) = delete;
  InprocWorld& operator=(const InprocWorld&) = delete;

  int size() const { return size_; }
  // Rank `rank`'s endpoint; may be called more than once (all share the same lanes).
  std::shared_ptr<Transport> transport(int rank);
  // Marks `rank` as failed or exited; idempotent (the first reason is kept).
  void abort(int rank, const std::string& reason);
  // The reason `rank` was aborted, if it was.
  std::optional<std::string> abort_reason(int rank) const;
  // Holds `storage` until this world is destroyed, which spawn_ranks does after joining every
  // rank's thread: a rank that fails and unwinds cannot free memory it shared with the others
  // (Communicator::exchange_addresses) while they may still be reading it.
  void keep_alive(std::shared_ptr<const void> storage);

  // Used by InprocTransport and InprocRequest. post() takes the caller's reference; a send must
  // carry its number (next_number, or the one send_fast took).
  void post(inproc::PendingOp* op);
  // Publishes a message of at most inproc::kFastBytes in the (source, dest) fast box: true when
  // done (the send is complete), false when it must go through post() with *number.
  bool send_fast(int source, int dest, std::uint64_t tag, const void* data, std::size_t bytes,
                 std::uint64_t* number);
  // The number of a send from `source` to `dest` that goes through post().
  std::uint64_t next_number(int source, int dest) { return box(source, dest).next_number(); }
  // Makes `op` final: takes it out of its queue (failed as cancelled) or finishes its transfer.
  void cancel(inproc::PendingOp* op);
  void wait(inproc::PendingOp* op, std::chrono::steady_clock::time_point deadline);
  // Non-blocking: transfers a matched op if nobody has claimed it; true once final.
  bool test(inproc::PendingOp* op);

  explicit InprocWorld(int size);  // use create()

 private:
  // Unmatched ops of one (source, destination) pair in posting order.
  struct OpList {
    inproc::PendingOp* head = nullptr;
    inproc::PendingOp* tail = nullptr;
    void push_back(inproc::PendingOp* op);
    void erase(inproc::PendingOp* op);
    // The oldest op with `tag`, or null.
    inproc::PendingOp* find(std::uint64_t tag) const;
  };
  // At most one of the two lists holds ops of a given tag: a receive that finds a queued send
  // takes it, and the other way round.
  struct alignas(64) Lane {
    inproc::SpinLock lock;
    OpList sends;
    OpList recvs;
  };
  // Where a rank's waiting threads sleep after spinning.
  struct alignas(64) Waker {
    std::mutex mu;
    std::condition_variable cv;
    std::atomic<int> sleepers{0};
  };
  // The CPU a rank's thread last posted or waited on. A waiter whose peer last ran on its own CPU
  // sleeps at once instead of spinning: the peer cannot run until it gives the core up.
  struct alignas(64) CpuSlot {
    std::atomic<int> cpu{-1};
  };

  // Matches settle() made, acted on after the lane lock is released: transfers this thread does
  // at once and owners to wake (a big transfer is claimed by the first owner to wait).
  struct Matches {
    static constexpr int kCapacity = 8;
    std::array<std::pair<inproc::PendingOp*, inproc::PendingOp*>, kCapacity> transfers{};
    int count = 0;
    std::array<int, 2 * kCapacity> wakes{};
    int wake_count = 0;
  };

  Lane& lane(int dest, int source) {
    return lanes_[static_cast<std::size_t>(dest) * static_cast<std::size_t>(size_) +
                  static_cast<std::size_t>(source)];
  }
  void post_send(inproc::PendingOp* op);
  void post_recv(inproc::PendingOp* op);
  // The (source, dest) fast box, created on first use; existing_box: null before that.
  inproc::FastBox& box(int source, int dest);
  inproc::FastBox* existing_box(int source, int dest) const {
    return boxes_[static_cast<std::size_t>(dest) * static_cast<std::size_t>(size_) +
                  static_cast<std::size_t>(source)]
        .load(std::memory_order_acquire);
  }
  // Under the lane lock: while the oldest queued receive of `tag` has a message (the
  // lowest-numbered of the fast box and the queued sends), matches them. Fast-box messages are
  // delivered here; lane matches are left in `matches` for run().
  void settle(Lane& l, int source, int dest, std::uint64_t tag, Matches& matches);
  void run(Matches& matches);
  // Copies (or reduces) a fast-box message into `recv` and completes it; under the lane lock.
  void deliver_fast(inproc::FastBox& box, const inproc::FastBox::Message& message,
                    inproc::PendingOp& recv);
  // A receive still pending whose pair's fast box holds a message of its tag (a hint: settle()
  // decides under the lock).
  bool fast_pending(const inproc::PendingOp& op) const;
  // Settles `op`'s tag under its lane lock (a waiter that saw fast_pending).
  void settle_for(inproc::PendingOp& op);
  // Links a matched pair so that either owner can claim the transfer later; under the lane lock.
  static void link(inproc::PendingOp* send, inproc::PendingOp* recv);
  // Claims the transfer of a matched op (either side) and does it; false if already claimed.
  bool try_claim(inproc::PendingOp* op);
  bool claimable(const inproc::PendingOp* op) const;
  // Moves (copies or reduces) the message of `send` into `recv` and completes both, or fails both
  // when the sizes or types do not fit. Both are out of their queues; `recv` is claimed.
  void transfer(inproc::PendingOp& send, inproc::PendingOp& recv);
  // transfer() of a pair settle() matched, then the queue's reference to a buffered send dropped.
  void transfer_matched(inproc::PendingOp& send, inproc::PendingOp& recv);
  void complete(inproc::PendingOp& op, inproc::OpState state);
  void fail(inproc::PendingOp& op, std::string error);
  void wake(int rank);
  // Records the calling thread's CPU for `rank` (written only when it changed); returns it.
  int note_cpu(int rank);
  // If `rank`'s op may never complete because source or dest was aborted: the error.
  std::optional<std::string> aborted_error(const inproc::PendingOp& op);
  std::string describe(const inproc::PendingOp& op) const;
  bool is_aborted(int rank) const {
    return aborted_[static_cast<std::size_t>(rank)].load(std::memory_order_seq_cst);
  }

  int size_;
  std::unique_ptr<Lane[]> lanes_;  // size x size, index dest x size + source
  std::unique_ptr<std::atomic<inproc::FastBox*>[]> boxes_;  // the same index; owned
  std::unique_ptr<Waker[]> wakers_;
  std::unique_ptr<CpuSlot[]> cpus_;
  std::unique_ptr<std::atomic<bool>[]> aborted_;
  mutable std::mutex abort_mu_;
  std::vector<std::string> abort_reasons_;  // guarded by abort_mu_
  std::mutex kept_alive_mu_;
  std::vector<std::shared_ptr<const void>> kept_alive_;  // guarded by kept_alive_mu_
};

}  // namespace dtrain::comm
