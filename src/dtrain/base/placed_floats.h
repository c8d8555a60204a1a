// PlacedFloats: a zero-filled float array whose first element sits at a chosen byte offset within a
// 4 KiB page, for arrays that one loop streams side by side.
//
// Why: the optimizer update reads parameters, gradients and its state (momentum; Adam's two
// moments) element by element in one loop. When two of those arrays start at nearby offsets within
// their pages, the lines the loop is working on in each (and the ones the prefetcher has brought in
// ahead of it) fall into the same L1 sets, and on the AMD EPYC development machine some such pairs
// then evict each other on every access, depending on where the pages lie (most likely through the
// L1's way predictor, which tags lines by a hash of their linear address bits 12-27). Measured
// (docs/PERFORMANCE.md, "Optimizer update"): the same SGD-momentum update ran 1.3-2.8x slower at
// such placements, e.g. rank 0's ZeRO-1 shard of the Fashion-MNIST MLP, whose arrays malloc had put
// 0x30 and 0x140 bytes apart within their pages. Starting the streams a quarter or half a page
// apart keeps any two lines of different streams that share an L1 set at least 16 lines apart in
// the loop, more than it and the prefetcher hold at once, whatever the hash and the pages.
//
// Layout conventions that use this: nn::ParamStore puts parameters at page offset 0 and gradients
// at half a page (kHalfPage); optim::Optimizer puts its state vectors at the quarter points between
// them (optimizer.h, "Placement").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

namespace dtrain {

class PlacedFloats {
 public:
  static constexpr std::size_t kPageBytes = 4096;
  static constexpr std::size_t kQuarterPage = kPageBytes / 4;
  static constexpr std::size_t kHalfPage = kPageBytes / 2;

  PlacedFloats() = default;
  // n zero floats, the first at byte `page_offset` of a page; page_offset is reduced modulo the
  // page size and must be a multiple of 4 (throws InternalError otherwise).
  PlacedFloats(std::int64_t n, std::size_t page_offset);
  // Copies keep the source's page offset.
  PlacedFloats(const PlacedFloats& other);
  PlacedFloats& operator=(const PlacedFloats& other);
  // Moves leave the source empty.
  PlacedFloats(PlacedFloats&& other) noexcept;
  PlacedFloats& operator=(PlacedFloats&& other) noexcept;
  ~PlacedFloats() = default;

  float* data() { return data_; }
  const float* data() const { return data_; }
  std::int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<float> span() { return {data_, static_cast<std::size_t>(size_)}; }
  std::span<const float> span() const { return {data_, static_cast<std::size_t>(size_)}; }
  // The allocation behind data(), shared: whoever holds it keeps data() readable after this
  // object is destroyed or moved from (a rank that reads another rank's buffer in place,
  // comm::Communicator::exchange_addresses). Empty when this object is.
  std::shared_ptr<const void> storage() const { return block_; }
  // Byte offset of data() within its page (0 when empty).
  std::size_t page_offset() const;
  // The same values at another page offset (a copy of n floats; nothing when already there).
  void move_to(std::size_t page_offset);

  // Byte offset within its page of any address.
  static std::size_t page_offset_of(const void* address);

 private:
  std::shared_ptr<void> block_;  // freed with std::free by the last holder
  float* data_ = nullptr;
  std::int64_t size_ = 0;
};

}  // namespace dtrain
