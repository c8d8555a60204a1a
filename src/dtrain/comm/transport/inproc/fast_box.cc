#include "dtrain/comm/transport/inproc/fast_box.h"

#include <cstring>
#include <mutex>

namespace dtrain::comm::inproc {

std::uint64_t FastBox::next_number() {
  std::lock_guard<SpinLock> lock(sender_.lock);
  return sender_.next++;
}

bool FastBox::try_publish(std::uint64_t tag, const void* data, std::size_t bytes,
                          std::uint64_t* number) {
  std::lock_guard<SpinLock> lock(sender_.lock);
  const std::uint64_t n = sender_.next++;
  *number = n;
  const std::size_t i = n % kFastSlots;
  if (sender_.published[i] != sender_.known_consumed[i]) {
    // Looks busy: refresh what we know of the receiver's progress (one line for all slots).
    for (std::size_t k = 0; k < kFastSlots; ++k) {
      sender_.known_consumed[k] = consumed_[k].load(std::memory_order_acquire);
    }
    if (sender_.published[i] != sender_.known_consumed[i]) return false;
  }
  Slot& slot = slots_[i];
  slot.tag.store(tag, std::memory_order_relaxed);
  slot.bytes.store(static_cast<std::uint32_t>(bytes), std::memory_order_relaxed);
  if (bytes > 0) std::memcpy(slot.payload.data(), data, bytes);
  slot.number.store(n + 1, std::memory_order_seq_cst);
  sender_.published[i] = n + 1;
  return true;
}

FastBox::Message FastBox::oldest(std::uint64_t tag) const {
  // Senders publish without the lane lock, so one pass over the slots is not a snapshot: it can
  // read slot(k) just before message k is published and then, further on, see message k + 1,
  // published meanwhile, and take it first (a FIFO violation; found under ThreadSanitizer). Every
  // message numbered below one the first pass saw was published before that one, so a second
  // pass sees them all; consumers hold the lane lock, so what the first pass found is still there.
  if (!lowest(tag)) return Message{};
  return lowest(tag);
}

FastBox::Message FastBox::lowest(std::uint64_t tag) const {
  Message best;
  for (std::size_t i = 0; i < kFastSlots; ++i) {
    const std::uint64_t number = slots_[i].number.load(std::memory_order_seq_cst);
    if (number == consumed_[i].load(std::memory_order_relaxed)) continue;
    if (slots_[i].tag.load(std::memory_order_relaxed) != tag) continue;
    if (!best || number - 1 < best.number) {
      best.slot = static_cast<int>(i);
      best.number = number - 1;
    }
  }
  return best;
}

std::size_t FastBox::bytes(const Message& message) const {
  return slots_[static_cast<std::size_t>(message.slot)].bytes.load(std::memory_order_relaxed);
}

const std::byte* FastBox::payload(const Message& message) const {
  return slots_[static_cast<std::size_t>(message.slot)].payload.data();
}

void FastBox::consume(const Message& message) {
  consumed_[static_cast<std::size_t>(message.slot)].store(message.number + 1,
                                                          std::memory_order_release);
}

bool FastBox::has(std::uint64_t tag) const {
  for (std::size_t i = 0; i < kFastSlots; ++i) {
    const std::uint64_t number = slots_[i].number.load(std::memory_order_seq_cst);
    if (number != consumed_[i].load(std::memory_order_acquire) &&
        slots_[i].tag.load(std::memory_order_relaxed) == tag) {
      return true;
    }
  }
  return false;
}

}  // namespace dtrain::comm::inproc
