#include "dtrain/comm/transport/inproc/world.h"

#include <cstring>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/inproc/transport.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace dtrain::comm {
namespace {

using inproc::OpState;
using inproc::PendingOp;

// About 10-50 us of pause instructions before a waiter sleeps: long enough to catch a partner
// that is a few copies behind, short enough not to starve the other threads of a 2-core machine.
constexpr int kSpinIterations = 1000;

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

bool finished(const PendingOp& op) {
  const OpState state = op.state.load(std::memory_order_acquire);
  return state == OpState::kDone || state == OpState::kFailed;
}

}  // namespace

std::shared_ptr<InprocWorld> InprocWorld::create(int size) {
  if (size < 1) {
    throw ConfigError(fmt::format("inproc world: size {} < 1; give at least one rank", size));
  }
  return std::make_shared<InprocWorld>(size);
}

InprocWorld::InprocWorld(int size)
    : size_(size),
      mailboxes_(static_cast<std::size_t>(size)),
      wakers_(static_cast<std::size_t>(size)),
      aborted_(std::make_unique<std::atomic<bool>[]>(static_cast<std::size_t>(size))),
      abort_reasons_(static_cast<std::size_t>(size)) {
  for (int r = 0; r < size; ++r) aborted_[static_cast<std::size_t>(r)].store(false);
}

std::shared_ptr<Transport> InprocWorld::transport(int rank) {
  if (rank < 0 || rank >= size_) {
    throw ConfigError(fmt::format("inproc world: rank {} out of range [0, {})", rank, size_));
  }
  return std::make_shared<InprocTransport>(shared_from_this(), rank);
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
  return fmt::format("rank {}: recv from rank {} (tag {:#x}, {} bytes)", op.dest, op.source, op.tag,
                     op.bytes);
}

void InprocWorld::complete(PendingOp& op, OpState state) {
  const int owner = op.owner();
  op.state.store(state, std::memory_order_seq_cst);
  // Pairs with the waiter's sleepers increment before its last check of the state: either the
  // waiter sees the new state, or we see it asleep and wake it under its mutex.
  Waker& waker = wakers_[static_cast<std::size_t>(owner)];
  if (waker.sleepers.load(std::memory_order_seq_cst) > 0) {
    { std::lock_guard<std::mutex> lock(waker.mu); }
    waker.cv.notify_all();
  }
}

void InprocWorld::fail(PendingOp& op, std::string error) {
  op.error = std::move(error);
  complete(op, OpState::kFailed);
}

void InprocWorld::post(const std::shared_ptr<PendingOp>& op) {
  if (op->is_send) {
    post_send(op);
  } else {
    post_recv(op);
  }
}

void InprocWorld::post_send(const std::shared_ptr<PendingOp>& op) {
  Mailbox& box = mailboxes_[static_cast<std::size_t>(op->dest)];
  std::shared_ptr<PendingOp> match;
  {
    std::unique_lock<std::mutex> lock(box.mu);
    for (int rank : {op->source, op->dest}) {
      if (is_aborted(rank)) {
        lock.unlock();
        fail(*op, fmt::format("{} failed: rank {} aborted: {}", describe(*op), rank,
                              abort_reason(rank).value_or("")));
        return;
      }
    }
    const Key key{op->source, op->tag};
    auto it = box.recvs.find(key);
    if (it != box.recvs.end()) {
      match = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) box.recvs.erase(it);
      match->state.store(OpState::kMatched, std::memory_order_relaxed);
      op->state.store(OpState::kMatched, std::memory_order_relaxed);
    } else if (op->bytes <= kEagerBytes) {
      // Buffer a copy; the queued copy has no waiter and the caller's send is done at once.
      auto copy = std::make_shared<PendingOp>();
      copy->is_send = true;
      copy->source = op->source;
      copy->dest = op->dest;
      copy->tag = op->tag;
      copy->bytes = op->bytes;
      const auto* bytes = static_cast<const std::byte*>(op->send_data);
      copy->eager.assign(bytes, bytes + op->bytes);
      copy->send_data = copy->eager.data();
      copy->buffered = true;
      box.sends[key].push_back(std::move(copy));
      lock.unlock();
      complete(*op, OpState::kDone);
      return;
    } else {
      box.sends[key].push_back(op);
      return;
    }
  }
  transfer(*op, *match);
}

void InprocWorld::post_recv(const std::shared_ptr<PendingOp>& op) {
  Mailbox& box = mailboxes_[static_cast<std::size_t>(op->dest)];
  std::shared_ptr<PendingOp> match;
  {
    std::unique_lock<std::mutex> lock(box.mu);
    const Key key{op->source, op->tag};
    auto it = box.sends.find(key);
    if (it != box.sends.end()) {
      // A message already sent is delivered even if its sender has aborted since.
      match = std::move(it->second.front());
      it->second.pop_front();
      if (it->second.empty()) box.sends.erase(it);
      match->state.store(OpState::kMatched, std::memory_order_relaxed);
      op->state.store(OpState::kMatched, std::memory_order_relaxed);
    } else {
      for (int rank : {op->source, op->dest}) {
        if (is_aborted(rank)) {
          lock.unlock();
          fail(*op, fmt::format("{} failed: rank {} aborted: {}", describe(*op), rank,
                                abort_reason(rank).value_or("")));
          return;
        }
      }
      box.recvs[key].push_back(op);
      return;
    }
  }
  transfer(*match, *op);
}

void InprocWorld::transfer(PendingOp& send, PendingOp& recv) {
  if (send.bytes > recv.bytes) {
    const std::string error = fmt::format(
        "rank {} -> rank {} (tag {:#x}): message of {} bytes does not fit the receive buffer of {} "
        "bytes; both ranks must pass the same count and dtype",
        send.source, send.dest, send.tag, send.bytes, recv.bytes);
    fail(send, error);
    fail(recv, error);
    return;
  }
  if (send.bytes > 0) std::memcpy(recv.recv_data, send.send_data, send.bytes);
  complete(recv, OpState::kDone);
  complete(send, OpState::kDone);
}

void InprocWorld::cancel(const std::shared_ptr<PendingOp>& op) {
  if (finished(*op)) return;
  Mailbox& box = mailboxes_[static_cast<std::size_t>(op->dest)];
  {
    std::lock_guard<std::mutex> lock(box.mu);
    auto& queues = op->is_send ? box.sends : box.recvs;
    auto it = queues.find(Key{op->source, op->tag});
    if (it != queues.end()) {
      for (auto pos = it->second.begin(); pos != it->second.end(); ++pos) {
        if (pos->get() == op.get()) {
          it->second.erase(pos);
          if (it->second.empty()) queues.erase(it);
          op->state.store(OpState::kFailed, std::memory_order_release);
          return;
        }
      }
    }
  }
  // Not queued any more: the partner's thread is copying; the buffer must outlive that copy.
  while (!finished(*op)) std::this_thread::yield();
}

void InprocWorld::wait(const PendingOp& op, std::chrono::steady_clock::time_point deadline) {
  for (int i = 0; i < kSpinIterations && !finished(op); ++i) cpu_pause();
  if (!finished(op)) {
    Waker& waker = wakers_[static_cast<std::size_t>(op.owner())];
    std::unique_lock<std::mutex> lock(waker.mu);
    waker.sleepers.fetch_add(1, std::memory_order_seq_cst);
    while (!finished(op)) {
      if (waker.cv.wait_until(lock, deadline) == std::cv_status::timeout && !finished(op)) {
        waker.sleepers.fetch_sub(1, std::memory_order_seq_cst);
        throw CommTimeoutError(
            fmt::format("{} did not complete before its deadline", describe(op)));
      }
    }
    waker.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
  if (op.state.load(std::memory_order_acquire) == OpState::kFailed) throw CommError(op.error);
}

void InprocWorld::abort(int rank, const std::string& reason) {
  DTRAIN_CHECK(rank >= 0 && rank < size_, "rank {} of {}", rank, size_);
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    if (is_aborted(rank)) return;
    abort_reasons_[static_cast<std::size_t>(rank)] = reason;
    aborted_[static_cast<std::size_t>(rank)].store(true, std::memory_order_seq_cst);
  }
  // Sweep every mailbox for operations that now can never complete.
  for (int dest = 0; dest < size_; ++dest) {
    std::vector<std::shared_ptr<PendingOp>> doomed;
    Mailbox& box = mailboxes_[static_cast<std::size_t>(dest)];
    {
      std::lock_guard<std::mutex> lock(box.mu);
      // Receives waiting for the aborted rank, or posted by it.
      for (auto it = box.recvs.begin(); it != box.recvs.end();) {
        if (dest == rank || it->first.first == rank) {
          for (auto& op : it->second) doomed.push_back(std::move(op));
          it = box.recvs.erase(it);
        } else {
          ++it;
        }
      }
      // Sends to the aborted rank (nobody will receive them) and rendezvous sends from it (its
      // buffer may be gone); eager copies it sent to live ranks stay deliverable.
      for (auto it = box.sends.begin(); it != box.sends.end();) {
        auto& queue = it->second;
        for (auto pos = queue.begin(); pos != queue.end();) {
          const bool buffered = (*pos)->buffered;
          if (dest == rank || (it->first.first == rank && !buffered)) {
            if (!buffered) doomed.push_back(std::move(*pos));
            pos = queue.erase(pos);
          } else {
            ++pos;
          }
        }
        it = queue.empty() ? box.sends.erase(it) : std::next(it);
      }
    }
    for (auto& op : doomed) {
      fail(*op, fmt::format("{} failed: rank {} aborted: {}", describe(*op), rank, reason));
    }
  }
  // Wake every sleeper so that waits on ops failed above return now.
  for (auto& waker : wakers_) {
    { std::lock_guard<std::mutex> lock(waker.mu); }
    waker.cv.notify_all();
  }
}

}  // namespace dtrain::comm
