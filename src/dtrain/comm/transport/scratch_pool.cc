#include "dtrain/comm/transport/scratch_pool.h"

#include <algorithm>
#include <bit>
#include <utility>

namespace dtrain::comm {

ScratchPool::Lease& ScratchPool::Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    give_back();
    pool_ = std::move(other.pool_);
    buffer_ = std::move(other.buffer_);
    capacity_ = std::exchange(other.capacity_, 0);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ScratchPool::Lease::~Lease() { give_back(); }

void ScratchPool::Lease::give_back() {
  if (pool_ && buffer_) pool_->put_back(std::move(buffer_), capacity_);
  pool_.reset();
}

std::shared_ptr<ScratchPool> ScratchPool::create(std::size_t retained_limit_bytes) {
  return std::shared_ptr<ScratchPool>(new ScratchPool(retained_limit_bytes));
}

ScratchPool::Lease ScratchPool::acquire(std::size_t bytes) {
  Lease lease;
  lease.pool_ = shared_from_this();
  lease.size_ = bytes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::size_t best = free_.size();
    for (std::size_t i = 0; i < free_.size(); ++i) {
      if (free_[i].capacity >= bytes &&
          (best == free_.size() || free_[i].capacity < free_[best].capacity)) {
        best = i;
      }
    }
    if (best != free_.size()) {
      lease.buffer_ = std::move(free_[best].buffer);
      lease.capacity_ = free_[best].capacity;
      retained_ -= lease.capacity_;
      free_[best] = std::move(free_.back());
      free_.pop_back();
      return lease;
    }
  }
  // Powers of two from 4 KiB: the ragged last segments of a ring step reuse their siblings'
  // buffers instead of each keeping one of its own (at most 2x the bytes asked for).
  lease.capacity_ = std::bit_ceil(std::max<std::size_t>(bytes, kSmallestBuffer));
  lease.buffer_ = std::make_unique_for_overwrite<std::byte[]>(lease.capacity_);
  return lease;
}

void ScratchPool::put_back(std::unique_ptr<std::byte[]> buffer, std::size_t capacity) {
  std::lock_guard<std::mutex> lock(mu_);
  if (retained_ + capacity > retained_limit_) return;  // freed here, outside the limit
  retained_ += capacity;
  free_.push_back(FreeBuffer{std::move(buffer), capacity});
}

std::size_t ScratchPool::retained_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return retained_;
}

std::size_t ScratchPool::free_buffers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return free_.size();
}

}  // namespace dtrain::comm
