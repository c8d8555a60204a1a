#include "dtrain/comm/transport/inproc/world.h"

#include <sched.h>

#include <cstring>
#include <thread>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/inproc/transport.h"

namespace dtrain::comm {
namespace {

using inproc::OpState;
using inproc::PendingOp;

// A waiter checks its op between pause instructions (25-100 ns each on this VM) and sleeps after
// kSpinTime: long enough to catch a partner a few small messages behind, short enough not to
// starve the other threads of a 2-core machine. It never yields: on a busy machine a yield hands
// the core to another process for a whole time slice (measured: 4-byte allreduce median 500 us
// instead of 85 us under a load average of 8).
constexpr int kSpinIterations = 64;

// kSpinTime: DTRAIN_INPROC_SPIN_US, default 100 us (read once).
std::chrono::microseconds spin_time() {
  static const std::chrono::microseconds time{env::get_int("DTRAIN_INPROC_SPIN_US", 100)};
  return time;
}

bool is_final(OpState state) { return state == OpState::kDone || state == OpState::kFailed; }

bool finished(const PendingOp& op) { return is_final(op.state.load(std::memory_order_acquire)); }

}  // namespace

void InprocWorld::OpList::push_back(PendingOp* op) {
  op->prev = tail;
  op->next = nullptr;
  if (tail != nullptr) {
    tail->next = op;
  } else {
    head = op;
  }
  tail = op;
  op->queued = true;
}

void InprocWorld::OpList::erase(PendingOp* op) {
  if (op->prev != nullptr) {
    op->prev->next = op->next;
  } else {
    head = op->next;
  }
  if (op->next != nullptr) {
    op->next->prev = op->prev;
  } else {
    tail = op->prev;
  }
  op->prev = nullptr;
  op->next = nullptr;
  op->queued = false;
}

PendingOp* InprocWorld::OpList::find(std::uint64_t tag) const {
  for (PendingOp* op = head; op != nullptr; op = op->next) {
    if (op->tag == tag) return op;
  }
  return nullptr;
}

std::shared_ptr<InprocWorld> InprocWorld::create(int size) {
  if (size < 1) {
    throw ConfigError(fmt::format("inproc world: size {} < 1; give at least one rank", size));
  }
  return std::make_shared<InprocWorld>(size);
}

InprocWorld::InprocWorld(int size)
    : size_(size),
      lanes_(std::make_unique<Lane[]>(static_cast<std::size_t>(size) *
                                      static_cast<std::size_t>(size))),
      boxes_(std::make_unique<std::atomic<inproc::FastBox*>[]>(static_cast<std::size_t>(size) *
                                                               static_cast<std::size_t>(size))),
      wakers_(std::make_unique<Waker[]>(static_cast<std::size_t>(size))),
      cpus_(std::make_unique<CpuSlot[]>(static_cast<std::size_t>(size))),
      aborted_(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size))),
      abort_reasons_(static_cast<std::size_t>(size)) {
  for (int r = 0; r < size; ++r) aborted_[static_cast<std::size_t>(r)].store(false);
}

InprocWorld::~InprocWorld() {
  for (std::size_t i = 0; i < static_cast<std::size_t>(size_) * static_cast<std::size_t>(size_);
       ++i) {
    delete boxes_[i].load(std::memory_order_acquire);
  }
  // Requests hold their transport and so the world: only buffered small sends can be left.
  for (std::size_t i = 0; i < static_cast<std::size_t>(size_) * static_cast<std::size_t>(size_);
       ++i) {
    for (OpList* list : {&lanes_[i].sends, &lanes_[i].recvs}) {
      while (list->head != nullptr) {
        PendingOp* op = list->head;
        list->erase(op);
        if (op->buffered) inproc::release(op);
      }
    }
  }
}

std::shared_ptr<Transport> InprocWorld::transport(int rank) {
  if (rank < 0 || rank >= size_) {
    throw ConfigError(fmt::format("inproc world: rank {} out of range [0, {})", rank, size_));
  }
  return std::make_shared<InprocTransport>(shared_from_this(), rank);
}

void InprocWorld::keep_alive(std::shared_ptr<const void> storage) {
  if (!storage) return;
  std::lock_guard<std::mutex> lock(kept_alive_mu_);
  kept_alive_.push_back(std::move(storage));
}

std::optional<std::string> InprocWorld::abort_reason(int rank) const {
  if (!is_aborted(rank)) return std::nullopt;
  std::lock_guard<std::mutex> lock(abort_mu_);
  return abort_reasons_[static_cast<std::size_t>(rank)];
}

std::string InprocWorld::describe(const PendingOp& op) const {
  if (op.is_send) {
    return fmt::format("rank {}: send to rank {} (tag {:#x}, {} bytes)", op.source, op.dest, op.tag,
                       op.bytes);
  }
  return fmt::format("rank {}: {} from rank {} (tag {:#x}, {} bytes)", op.dest,
                     op.reduce ? "recv-reduce" : "recv", op.source, op.tag, op.bytes);
}

std::optional<std::string> InprocWorld::aborted_error(const PendingOp& op) {
  for (int rank : {op.source, op.dest}) {
    if (is_aborted(rank)) {
      return fmt::format("{} failed: rank {} aborted: {}", describe(op), rank,
                         abort_reason(rank).value_or(""));
    }
  }
  return std::nullopt;
}

void InprocWorld::wake(int rank) {
  // Pairs with the waiter's sleepers increment before its last check of the state: either the
  // waiter sees the new state, or we see it asleep and wake it under its mutex.
  Waker& waker = wakers_[static_cast<std::size_t>(rank)];
  if (waker.sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(waker.mu); }
    waker.cv.notify_all();
  }
}

int InprocWorld::note_cpu(int rank) {
  const int cpu = sched_getcpu();
  std::atomic<int>& slot = cpus_[static_cast<std::size_t>(rank)].cpu;
  if (slot.load(std::memory_order_relaxed) != cpu) slot.store(cpu, std::memory_order_relaxed);
  return cpu;
}

void InprocWorld::complete(PendingOp& op, OpState state) {
  const int owner = op.owner();
  op.state.store(state, std::memory_order_seq_cst);
  wake(owner);
}

void InprocWorld::fail(PendingOp& op, std::string error) {
  op.error = std::move(error);
  complete(op, OpState::kFailed);
}

void InprocWorld::post(PendingOp* op) {
  note_cpu(op->owner());
  if (op->is_send) {
    post_send(op);
  } else {
    post_recv(op);
  }
}

void InprocWorld::link(PendingOp* send, PendingOp* recv) {
  send->partner = recv;
  inproc::retain(recv);
  recv->partner = send;
  inproc::retain(send);
  send->state.store(OpState::kMatched, std::memory_order_seq_cst);
  recv->state.store(OpState::kMatched, std::memory_order_seq_cst);
}

inproc::FastBox& InprocWorld::box(int source, int dest) {
  std::atomic<inproc::FastBox*>& slot =
      boxes_[static_cast<std::size_t>(dest) * static_cast<std::size_t>(size_) +
             static_cast<std::size_t>(source)];
  inproc::FastBox* box = slot.load(std::memory_order_acquire);
  if (box != nullptr) return *box;
  auto* made = new inproc::FastBox;
  if (slot.compare_exchange_strong(box, made, std::memory_order_acq_rel)) return *made;
  delete made;  // another thread of either rank installed one first
  return *box;
}

bool InprocWorld::send_fast(int source, int dest, std::uint64_t tag, const void* data,
                            std::size_t bytes, std::uint64_t* number) {
  inproc::FastBox& b = box(source, dest);
  if (is_aborted(source) || is_aborted(dest)) {
    *number = b.next_number();  // the lane path fails it, naming the aborted rank
    return false;
  }
  note_cpu(source);
  if (!b.try_publish(tag, data, bytes, number)) return false;
  wake(dest);  // a receiver asleep on a queued receive of this tag
  return true;
}

void InprocWorld::deliver_fast(inproc::FastBox& box, const inproc::FastBox::Message& message,
                               PendingOp& recv) {
  const std::size_t bytes = box.bytes(message);
  const bool fits = recv.reduce ? bytes == recv.bytes : bytes <= recv.bytes;
  if (!fits) {
    box.consume(message);
    fail(recv, fmt::format("rank {} -> rank {} (tag {:#x}): message of {} bytes but the {} {} "
                           "bytes; both ranks must pass the same count and dtype",
                           recv.source, recv.dest, recv.tag, bytes,
                           recv.reduce ? "reducing receive takes exactly" : "receive buffer holds",
                           recv.bytes));
    return;
  }
  if (recv.reduce) {
    reduce_into(recv.recv_data, box.payload(message),
                static_cast<std::int64_t>(bytes / dtype_size(recv.dtype)), recv.dtype,
                recv.reduce_op);
  } else if (bytes > 0) {
    std::memcpy(recv.recv_data, box.payload(message), bytes);
  }
  box.consume(message);
  complete(recv, OpState::kDone);
}

void InprocWorld::settle(Lane& l, int source, int dest, std::uint64_t tag, Matches& matches) {
  inproc::FastBox* fast_box = existing_box(source, dest);
  for (;;) {
    PendingOp* recv = l.recvs.find(tag);
    if (recv == nullptr) return;
    const inproc::FastBox::Message fast =
        fast_box != nullptr ? fast_box->oldest(tag) : inproc::FastBox::Message{};
    PendingOp* send = l.sends.find(tag);
    if (fast && (send == nullptr || fast.number < send->number)) {
      l.recvs.erase(recv);
      deliver_fast(*fast_box, fast, *recv);
      continue;
    }
    if (send == nullptr) return;
    l.recvs.erase(recv);
    l.sends.erase(send);
    if (send->buffered || send->bytes <= kCopyOnMatchBytes) {
      // Claimed by this thread before anyone else can see the match.
      recv->state.store(OpState::kCopying, std::memory_order_relaxed);
      if (matches.count == Matches::kCapacity) {
        // Rare (a burst of queued pairs): move these bytes under the lock rather than allocate.
        transfer_matched(*send, *recv);
        continue;
      }
      matches.transfers[static_cast<std::size_t>(matches.count++)] = {send, recv};
    } else {
      link(send, recv);
      // Both owners may sleep; the first to wait claims the transfer.
      if (matches.wake_count + 2 <= static_cast<int>(matches.wakes.size())) {
        matches.wakes[static_cast<std::size_t>(matches.wake_count++)] = recv->owner();
        matches.wakes[static_cast<std::size_t>(matches.wake_count++)] = send->owner();
      } else {
        wake(recv->owner());
        wake(send->owner());
      }
    }
  }
}

void InprocWorld::transfer_matched(PendingOp& send, PendingOp& recv) {
  // A rendezvous send may be freed by its owner as soon as transfer() completes it.
  const bool buffered = send.buffered;
  transfer(send, recv);
  if (buffered) inproc::release(&send);
}

void InprocWorld::run(Matches& matches) {
  for (int k = 0; k < matches.count; ++k) {
    auto [send, recv] = matches.transfers[static_cast<std::size_t>(k)];
    transfer_matched(*send, *recv);
  }
  for (int k = 0; k < matches.wake_count; ++k) wake(matches.wakes[static_cast<std::size_t>(k)]);
}

void InprocWorld::post_send(PendingOp* op) {
  Lane& l = lane(op->dest, op->source);
  Matches matches;
  l.lock.lock();
  if (auto error = aborted_error(*op)) {
    l.lock.unlock();
    fail(*op, std::move(*error));
    return;
  }
  l.sends.push_back(op);
  settle(l, op->source, op->dest, op->tag, matches);
  if (op->queued && op->bytes <= kEagerBytes) {
    // Not matched (no receive waits, or the waiting one took an older fast-box message): the op
    // itself waits in the queue with a copy of the bytes (the queue holds a reference), so the
    // caller's small send is complete at once and its buffer free.
    if (op->bytes > 0) std::memcpy(op->eager.data(), op->send_data, op->bytes);
    op->send_data = op->eager.data();
    op->buffered = true;
    inproc::retain(op);
    op->state.store(OpState::kDone, std::memory_order_release);
  }
  l.lock.unlock();
  run(matches);
}

void InprocWorld::post_recv(PendingOp* op) {
  Lane& l = lane(op->dest, op->source);
  Matches matches;
  l.lock.lock();
  l.recvs.push_back(op);
  // A message already sent is delivered even if its sender has aborted since.
  settle(l, op->source, op->dest, op->tag, matches);
  if (op->queued && (is_aborted(op->source) || is_aborted(op->dest))) {
    // Fast-box sends take no lane lock: the sender may have published its last message after the
    // settle above, then returned and been marked aborted (a rank that returns is). Its abort flag
    // is stored after that publish, so having seen the flag, a second look finds the message.
    settle(l, op->source, op->dest, op->tag, matches);
    if (op->queued) {
      l.recvs.erase(op);
      l.lock.unlock();
      run(matches);
      fail(*op, aborted_error(*op).value_or("a rank aborted"));
      return;
    }
  }
  l.lock.unlock();
  run(matches);
}

bool InprocWorld::fast_pending(const PendingOp& op) const {
  if (op.is_send) return false;
  const inproc::FastBox* b = existing_box(op.source, op.dest);
  return b != nullptr && op.state.load(std::memory_order_seq_cst) == OpState::kPending &&
         b->has(op.tag);
}

void InprocWorld::settle_for(PendingOp& op) {
  Lane& l = lane(op.dest, op.source);
  Matches matches;
  l.lock.lock();
  settle(l, op.source, op.dest, op.tag, matches);
  l.lock.unlock();
  run(matches);
}

bool InprocWorld::claimable(const PendingOp* op) const {
  if (op->state.load(std::memory_order_seq_cst) != OpState::kMatched) return false;
  const PendingOp* recv = op->is_send ? op->partner : op;
  return recv->state.load(std::memory_order_seq_cst) == OpState::kMatched;
}

bool InprocWorld::try_claim(PendingOp* op) {
  // The caller saw op->state == kMatched (acquire), so op->partner is set.
  PendingOp* recv = op->is_send ? op->partner : op;
  PendingOp* send = op->is_send ? op : op->partner;
  OpState expected = OpState::kMatched;
  if (!recv->state.compare_exchange_strong(expected, OpState::kCopying,
                                           std::memory_order_acq_rel)) {
    return false;
  }
  transfer(*send, *recv);
  return true;
}

void InprocWorld::transfer(PendingOp& send, PendingOp& recv) {
  const bool fits = recv.reduce ? send.bytes == recv.bytes : send.bytes <= recv.bytes;
  if (!fits) {
    const std::string error =
        recv.reduce
            ? fmt::format(
                  "rank {} -> rank {} (tag {:#x}): message of {} bytes but the reducing receive "
                  "takes exactly {} bytes; both ranks must pass the same count and dtype",
                  send.source, send.dest, send.tag, send.bytes, recv.bytes)
            : fmt::format(
                  "rank {} -> rank {} (tag {:#x}): message of {} bytes does not fit the receive "
                  "buffer of {} bytes; both ranks must pass the same count and dtype",
                  send.source, send.dest, send.tag, send.bytes, recv.bytes);
    if (!send.buffered) fail(send, error);
    fail(recv, error);
    return;
  }
  if (recv.reduce) {
    const auto count = static_cast<std::int64_t>(send.bytes / dtype_size(recv.dtype));
    reduce_into(recv.recv_data, send.send_data, count, recv.dtype, recv.reduce_op);
  } else if (send.bytes > 0) {
    std::memcpy(recv.recv_data, send.send_data, send.bytes);
  }
  complete(recv, OpState::kDone);
  if (!send.buffered) complete(send, OpState::kDone);
}

bool InprocWorld::test(PendingOp* op) {
  OpState state = op->state.load(std::memory_order_acquire);
  if (state == OpState::kPending && fast_pending(*op)) {
    settle_for(*op);
    state = op->state.load(std::memory_order_acquire);
  }
  if (state == OpState::kMatched && try_claim(op))
    state = op->state.load(std::memory_order_acquire);
  if (state == OpState::kFailed) throw CommError(op->error);
  return state == OpState::kDone;
}

void InprocWorld::cancel(PendingOp* op) {
  if (finished(*op)) return;
  Lane& l = lane(op->dest, op->source);
  l.lock.lock();
  if (op->queued) {
    // Matching is FIFO per (source, tag): a later op of the same stream, still queued, would be
    // matched in this one's place (a message of another size, or the wrong bytes). So it fails
    // too, as the stream is broken. Buffered small sends are complete for their sender and stay.
    OpList& list = op->is_send ? l.sends : l.recvs;
    bool failed_later = false;
    for (PendingOp* later = op->next; later != nullptr;) {
      PendingOp* following = later->next;
      if (later->tag == op->tag && !later->buffered) {
        list.erase(later);
        later->error = fmt::format(
            "rank {} -> rank {} (tag {:#x}, {} bytes): an earlier {} of the same rank pair and tag "
            "was cancelled (its owner failed or gave up), so this one cannot be matched in order",
            later->source, later->dest, later->tag, later->bytes,
            later->is_send ? "send" : "receive");
        later->state.store(OpState::kFailed, std::memory_order_release);
        failed_later = true;
      }
      later = following;
    }
    list.erase(op);
    op->state.store(OpState::kFailed, std::memory_order_release);
    l.lock.unlock();
    if (failed_later) wake(op->owner());
    return;
  }
  l.lock.unlock();
  // Matched: the buffer must outlive the transfer, so do it here or wait for the thread doing it.
  for (int spins = 0;; ++spins) {
    const OpState state = op->state.load(std::memory_order_acquire);
    if (is_final(state)) return;
    if (state == OpState::kMatched && try_claim(op)) return;
    if (spins < kSpinIterations) {
      inproc::cpu_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void InprocWorld::wait(PendingOp* op, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    // Spin for up to kSpinTime, reading the clock once per round of kSpinIterations pauses; one
    // round only when the peer last ran on this CPU (the scheduler often puts a woken thread
    // next to its waker): spinning would only delay it.
    const int cpu = note_cpu(op->owner());
    const int peer = op->is_send ? op->dest : op->source;
    const bool shared_cpu =
        cpus_[static_cast<std::size_t>(peer)].cpu.load(std::memory_order_relaxed) == cpu;
    const auto spin_end = std::chrono::steady_clock::now() +
                          (shared_cpu ? std::chrono::microseconds{0} : spin_time());
    do {
      for (int i = 0; i < kSpinIterations; ++i) {
        const OpState state = op->state.load(std::memory_order_acquire);
        if (state == OpState::kDone) return;
        if (state == OpState::kFailed) throw CommError(op->error);
        if (state == OpState::kMatched && try_claim(op)) continue;  // now final
        if (state == OpState::kPending && fast_pending(*op)) {
          settle_for(*op);
          continue;
        }
        inproc::cpu_pause();
      }
    } while (std::chrono::steady_clock::now() < spin_end);
    Waker& waker = wakers_[static_cast<std::size_t>(op->owner())];
    std::unique_lock<std::mutex> lock(waker.mu);
    waker.sleepers.fetch_add(1, std::memory_order_seq_cst);
    bool timed_out = false;
    while (!finished(*op) && !claimable(op) && !fast_pending(*op)) {
      if (waker.cv.wait_until(lock, deadline) == std::cv_status::timeout) {
        timed_out = !finished(*op) && !claimable(op) && !fast_pending(*op);
        break;
      }
    }
    waker.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (timed_out) {
      throw CommTimeoutError(fmt::format("{} did not complete before its deadline", describe(*op)));
    }
  }
}

void InprocWorld::abort(int rank, const std::string& reason) {
  DTRAIN_CHECK(rank >= 0 && rank < size_, "rank {} of {}", rank, size_);
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (is_aborted(rank)) return;
    abort_reasons_[static_cast<std::size_t>(rank)] = reason;
    aborted_[static_cast<std::size_t>(rank)].store(true, std::memory_order_seq_cst);
  }
  // Sweep every lane into or out of `rank` for operations that now can never complete.
  for (int dest = 0; dest < size_; ++dest) {
    for (int source = 0; source < size_; ++source) {
      if (dest != rank && source != rank) continue;
      std::vector<PendingOp*> doomed;
      Lane& l = lane(dest, source);
      Matches matches;
      l.lock.lock();
      // Sends to the aborted rank (nobody will receive them) and rendezvous sends from it (its
      // buffer may be gone); buffered copies it sent to live ranks stay deliverable.
      for (PendingOp* op = l.sends.head; op != nullptr;) {
        PendingOp* next = op->next;
        if (dest == rank || !op->buffered) {
          l.sends.erase(op);
          if (op->buffered) {
            inproc::release(op);
          } else {
            inproc::retain(op);
            doomed.push_back(op);
          }
        }
        op = next;
      }
      // What the aborted rank sent before it went stays deliverable: queued receives first take
      // what its fast box and buffered sends hold.
      if (source == rank) {
        std::vector<std::uint64_t> tags;
        for (PendingOp* op = l.recvs.head; op != nullptr; op = op->next) tags.push_back(op->tag);
        for (std::uint64_t tag : tags) settle(l, source, dest, tag, matches);
      }
      // Receives waiting for the aborted rank, or posted by it.
      while (PendingOp* op = l.recvs.head) {
        l.recvs.erase(op);
        inproc::retain(op);
        doomed.push_back(op);
      }
      l.lock.unlock();
      run(matches);
      for (PendingOp* op : doomed) {
        fail(*op, fmt::format("{} failed: rank {} aborted: {}", describe(*op), rank, reason));
        inproc::release(op);
      }
    }
  }
  // Wake every sleeper so that waits on ops failed above return now.
  for (int r = 0; r < size_; ++r) {
    Waker& waker = wakers_[static_cast<std::size_t>(r)];
    { std::lock_guard<std::mutex> lock(waker.mu); }
    waker.cv.notify_all();
  }
}

}  // namespace dtrain::comm
