// Reusable temporaries for receives that land somewhere other than the user's buffer
// (Transport::irecv_reduce's default: receive into a temporary, then reduce).
//
// Why not allocate per message: glibc serves a large block from the top of the heap once its
// mmap threshold has risen, and trims the top back to the kernel when the block is freed, so a
// fresh temporary page-faults on every use (~0.25 us per 4 KiB page). The ring allreduce over the
// mpi transport at 4 MiB, np=2, took 1,230 us per call with 1 MiB segments (two fresh 1 MiB
// temporaries per step) against 390 us with 2 MiB segments, which happened to escape the trim.
// A pooled buffer is faulted in once.
//
// Thread-safe: the caller's thread and the communicator's async thread share one transport.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace dtrain::comm {

class ScratchPool : public std::enable_shared_from_this<ScratchPool> {
 public:
  // A buffer of at least `size()` bytes, back in the pool when the lease is destroyed. Holds the
  // pool alive, so a lease may outlive the transport that handed it out.
  class Lease {
   public:
    Lease() = default;
    Lease(Lease&&) noexcept = default;
    Lease& operator=(Lease&&) noexcept;
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease();

    std::byte* data() const { return buffer_.get(); }
    std::size_t size() const { return size_; }

   private:
    friend class ScratchPool;
    void give_back();

    std::shared_ptr<ScratchPool> pool_;
    std::unique_ptr<std::byte[]> buffer_;
    std::size_t capacity_ = 0;
    std::size_t size_ = 0;
  };

  // Keeps at most `retained_limit_bytes` of free buffers; larger returns are freed.
  static std::shared_ptr<ScratchPool> create(std::size_t retained_limit_bytes = kDefaultRetained);

  // The smallest free buffer that holds `bytes`, or a new one of the next power of two (at least
  // kSmallestBuffer); uninitialised either way.
  Lease acquire(std::size_t bytes);

  std::size_t retained_bytes() const;
  std::size_t free_buffers() const;

  static constexpr std::size_t kSmallestBuffer = 4096;
  // 64 MiB: a few ring segments and whole buffers of the tensor sizes training reduces.
  static constexpr std::size_t kDefaultRetained = std::size_t{64} << 20;

 private:
  explicit ScratchPool(std::size_t retained_limit_bytes) : retained_limit_(retained_limit_bytes) {}

  struct FreeBuffer {
    std::unique_ptr<std::byte[]> buffer;
    std::size_t capacity = 0;
  };

  void put_back(std::unique_ptr<std::byte[]> buffer, std::size_t capacity);

  const std::size_t retained_limit_;
  mutable std::mutex mu_;
  std::vector<FreeBuffer> free_;
  std::size_t retained_ = 0;
};

}  // namespace dtrain::comm
