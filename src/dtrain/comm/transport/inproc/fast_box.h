// The small-message path of the in-process transport (private to inproc/), after Open MPI's
// shared-memory "fast box": one FastBox per ordered rank pair (source -> dest), a ring of
// kFastSlots cache-line slots, each holding one message of at most kFastBytes with its tag, size
// and number, published by one release store.
//
// Why: a message through a lane (world.h) touches four or five cache lines that the other rank's
// core last wrote (the lane lock and lists, the partner op, its state, the receive buffer), and
// on this VM each such transfer costs ~60 ns in its fast state and ~250 ns in its slow one (the
// round trip of build/bench/core_ping_pong_bench is 120 vs 500 ns). A fast-box message moves in
// ONE line: the sender writes its slot, the receiver reads it. docs/INPROC.md has the figures.
//
// Ordering (FIFO per (source, tag) across both paths): every message of a pair, fast or through
// the lane, takes the next number of the pair's counter (next_number / try_publish, under the
// sender-side lock). A receive takes the lowest-numbered message of its tag among the fast box
// and the lane's queued sends (InprocWorld::settle, under the lane lock), and only consumers
// holding the lane lock ever consume a slot; so a slot's message and a lane send are ordered by
// number no matter which path each took.
//
// Memory: the sender writes tag, size and payload, then stores the slot's number (seq_cst: it
// pairs with the receiver's sleeper count, see InprocWorld::wait); a consumer reads the number,
// then the payload, then stores the number into `consumed_` (release); the sender reuses a slot
// only after reading that (acquire). The sender keeps what it last saw of `consumed_` on its own
// lines and re-reads the receiver's line only when a slot looks busy: about once per kFastSlots
// messages in a ping-pong.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "dtrain/comm/transport/inproc/spin_lock.h"

namespace dtrain::comm::inproc {

// A slot is one cache line: number (8) + tag (8) + payload (40) + size (4) = 60 bytes.
inline constexpr std::size_t kFastBytes = 40;
inline constexpr std::size_t kFastSlots = 8;

class FastBox {
 public:
  // A published, unconsumed message: its slot and its number in the pair's sequence.
  struct Message {
    int slot = -1;
    std::uint64_t number = 0;
    explicit operator bool() const { return slot >= 0; }
  };

  // Sender side (threads of the source rank). The pair's next number, for a message that goes
  // through the lane.
  std::uint64_t next_number();
  // Takes the next number (into *number) and publishes the message in its slot; false, with the
  // number still taken, when that slot's last message is not consumed yet (the caller then sends
  // through the lane). bytes <= kFastBytes.
  bool try_publish(std::uint64_t tag, const void* data, std::size_t bytes, std::uint64_t* number);

  // Receiver side, under the lane lock of (dest, source): the lowest-numbered unconsumed message
  // with `tag`, if any.
  Message oldest(std::uint64_t tag) const;
  std::size_t bytes(const Message& message) const;
  const std::byte* payload(const Message& message) const;
  // After the payload has been read: the slot may be reused.
  void consume(const Message& message);

  // Without the lane lock (a waiter polling): whether some unconsumed message has `tag`.
  bool has(std::uint64_t tag) const;

 private:
  struct alignas(64) Slot {
    // 1 + the number of the message in the slot; 0 = never used.
    std::atomic<std::uint64_t> number{0};
    std::atomic<std::uint64_t> tag{0};
    // At offset 16: 8-byte elements are read in place (reduce_into of f64 / i64).
    alignas(16) std::array<std::byte, kFastBytes> payload{};
    std::atomic<std::uint32_t> bytes{0};
  };
  static_assert(sizeof(Slot) == 64);

  // One pass over the slots: the lowest-numbered message with `tag` seen (oldest() says why one
  // pass is not enough).
  Message lowest(std::uint64_t tag) const;
  static_assert(offsetof(Slot, payload) % 16 == 0);

  // Written by the source's threads only (under `lock`).
  struct alignas(64) SenderSide {
    SpinLock lock;
    std::uint64_t next = 0;
    std::array<std::uint64_t, kFastSlots> published{};       // 1 + number last written per slot
    std::array<std::uint64_t, kFastSlots> known_consumed{};  // what we last read of consumed_
  };

  std::array<Slot, kFastSlots> slots_;
  // Written by the destination's threads (under the lane lock): 1 + the number last consumed.
  alignas(64) std::array<std::atomic<std::uint64_t>, kFastSlots> consumed_{};
  SenderSide sender_;
};

}  // namespace dtrain::comm::inproc
