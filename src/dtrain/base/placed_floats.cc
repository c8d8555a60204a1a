#include "dtrain/base/placed_floats.h"

#include <fmt/format.h>

#include <algorithm>
#include <new>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain {

PlacedFloats::PlacedFloats(std::int64_t n, std::size_t page_offset) {
  page_offset %= kPageBytes;
  if (n < 0 || page_offset % sizeof(float) != 0) {
    throw InternalError(
        fmt::format("PlacedFloats({}, {}): need n >= 0 and a multiple of 4", n, page_offset));
  }
  if (n == 0) return;
  // One page more than the floats need, so that any offset within the first page fits.
  const std::size_t bytes =
      (page_offset + static_cast<std::size_t>(n) * sizeof(float) + kPageBytes - 1) / kPageBytes *
      kPageBytes;
  void* block = std::aligned_alloc(kPageBytes, bytes);
  if (block == nullptr) throw std::bad_alloc();
  block_ = std::shared_ptr<void>(block, [](void* p) { std::free(p); });
  data_ = reinterpret_cast<float*>(static_cast<char*>(block_.get()) + page_offset);
  size_ = n;
  std::fill(data_, data_ + n, 0.0f);
}

PlacedFloats::PlacedFloats(const PlacedFloats& other)
    : PlacedFloats(other.size_, other.page_offset()) {
  std::copy(other.data_, other.data_ + other.size_, data_);
}

PlacedFloats& PlacedFloats::operator=(const PlacedFloats& other) {
  if (this != &other) *this = PlacedFloats(other);
  return *this;
}

PlacedFloats::PlacedFloats(PlacedFloats&& other) noexcept
    : block_(std::move(other.block_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

PlacedFloats& PlacedFloats::operator=(PlacedFloats&& other) noexcept {
  block_ = std::move(other.block_);
  data_ = std::exchange(other.data_, nullptr);
  size_ = std::exchange(other.size_, 0);
  return *this;
}

std::size_t PlacedFloats::page_offset_of(const void* address) {
  return reinterpret_cast<std::uintptr_t>(address) % kPageBytes;
}

std::size_t PlacedFloats::page_offset() const { return data_ ? page_offset_of(data_) : 0; }

void PlacedFloats::move_to(std::size_t page_offset) {
  page_offset %= kPageBytes;
  if (empty() || page_offset == this->page_offset()) return;
  PlacedFloats moved(size_, page_offset);
  std::copy(data_, data_ + size_, moved.data_);
  *this = std::move(moved);
}

}  // namespace dtrain
