// The abstract point-to-point interface every collective algorithm is written against. Only
// abstract classes live in this folder (with the defaults of optional operations, which a
// transport may override, and what those defaults use: scratch_pool.h); each concrete transport
// (inproc/, later mpi/, tcp/) has its own sub-folder with the same file set (world.h, transport.h,
// request.h).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/reduce_op.h"
#include "dtrain/comm/transport/scratch_pool.h"

namespace dtrain::comm {

// One posted send or receive. Completion means: for a send, the buffer may be reused; for a
// receive, the message is in the buffer. Destroying a request that has not completed cancels it
// (it leaves the matching queue, or waits for a copy already under way to finish).
class Request {
 public:
  virtual ~Request() = default;
  // True once complete; throws CommError if the operation failed (peer aborted, size mismatch).
  virtual bool test() = 0;
  // Blocks until complete or until `deadline`: throws CommTimeoutError naming this rank, the peer,
  // the tag and the size when the deadline passes, CommError when the operation failed. The
  // request stays valid after a timeout: it may be waited on again with a later deadline.
  virtual void wait(std::chrono::steady_clock::time_point deadline) = 0;

  // What the request waits for, in the words of a stall warning (Channel::wait): the peer (-1:
  // not recorded), whether it is a send, and its bytes. Set by whoever posted it.
  void describe_as(int peer, bool is_send, std::size_t bytes) {
    peer_ = peer;
    is_send_ = is_send;
    bytes_ = bytes;
  }
  int peer() const { return peer_; }
  bool is_send() const { return is_send_; }
  std::size_t bytes() const { return bytes_; }

 private:
  int peer_ = -1;
  bool is_send_ = false;
  std::size_t bytes_ = 0;
};

// Tagged, asynchronous point-to-point messages between the `size()` ranks of one world.
// Ordering: messages from one source to one destination with the same tag are matched in the
// order they were posted (FIFO per (source, tag)); different tags never match each other.
// A receive buffer smaller than the matched message fails both sides with both sizes named; a
// larger one receives the message and leaves the rest untouched. Implementations are thread-safe:
// several threads of one rank (the caller and the communicator's async thread) may post at once.
class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "inproc", "mpi", ...: printed in logs, stats and benchmark tables.
  virtual std::string_view name() const = 0;
  // True when every rank is a thread of this process (inproc), so that a rank may read memory
  // another rank owns, between two messages that order the accesses (Communicator::
  // exchange_addresses, MPI-3's shared-memory windows for threads).
  virtual bool shares_memory() const { return false; }
  // Where shares_memory(): keeps `storage` allocated until the whole world has ended, so that
  // memory a rank shared with the others outlives that rank's thread (Communicator::
  // exchange_addresses). Elsewhere there is nothing to keep: each rank reads only its own memory.
  virtual void keep_alive(std::shared_ptr<const void> /*storage*/) {}
  // `data` must stay valid and unchanged until the request completes or is destroyed.
  virtual std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                         std::size_t bytes) = 0;
  // `data` must stay valid until the request completes or is destroyed.
  virtual std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                         std::size_t bytes) = 0;

  // Receives a message of exactly `bytes` (count x element size of `dtype`) from `peer` and
  // reduces it into `data`: data[i] = data[i] (op) message[i], complete when the result is in
  // `data`. Same matching, ordering and failure rules as irecv; the sender uses plain isend.
  // Default: irecv into a temporary owned by the request, reduced when the request is first
  // found complete (two passes more than a transport that reduces straight from the sender's
  // memory, as inproc does).
  virtual std::unique_ptr<Request> irecv_reduce(int peer, std::uint64_t tag, void* data,
                                                std::size_t bytes, DType dtype, ReduceOp op);

  // The transport's own allreduce in place over all its ranks (MPI_Allreduce for mpi), used by
  // the "native" algorithm. Returns false when the transport has none (inproc); the caller then
  // reports that. kAvg arrives as kSum, as for every algorithm (the Communicator divides).
  virtual bool native_allreduce(void* /*data*/, std::int64_t /*count*/, DType /*dtype*/,
                                ReduceOp /*op*/,
                                std::chrono::steady_clock::time_point /*deadline*/) {
    return false;
  }

  // Temporaries for irecv_reduce's default (and any transport's own receive staging).
  ScratchPool& scratch_pool() { return *scratch_pool_; }

 private:
  std::shared_ptr<ScratchPool> scratch_pool_ = ScratchPool::create();
};

namespace transport_detail {

// Transport::irecv_reduce's default: the message lands in `scratch_` (from the transport's pool),
// then one reduce_into.
class ReceiveThenReduce final : public Request {
 public:
  ReceiveThenReduce(Transport& transport, int peer, std::uint64_t tag, void* data,
                    std::size_t bytes, DType dtype, ReduceOp op)
      : data_(data),
        count_(static_cast<std::int64_t>(bytes / dtype_size(dtype))),
        dtype_(dtype),
        op_(op),
        scratch_(transport.scratch_pool().acquire(bytes)),
        receive_(transport.irecv(peer, tag, scratch_.data(), bytes)) {}

  bool test() override {
    if (!reduced_ && receive_->test()) reduce();
    return reduced_;
  }
  void wait(std::chrono::steady_clock::time_point deadline) override {
    if (reduced_) return;
    receive_->wait(deadline);
    reduce();
  }

 private:
  void reduce() {
    reduce_into(data_, scratch_.data(), count_, dtype_, op_);
    reduced_ = true;
  }

  void* data_;
  std::int64_t count_;
  DType dtype_;
  ReduceOp op_;
  bool reduced_ = false;
  // Declared before receive_: destroyed after it, since cancelling may wait for a copy into it.
  ScratchPool::Lease scratch_;
  std::unique_ptr<Request> receive_;
};

}  // namespace transport_detail

inline std::unique_ptr<Request> Transport::irecv_reduce(int peer, std::uint64_t tag, void* data,
                                                        std::size_t bytes, DType dtype,
                                                        ReduceOp op) {
  return std::make_unique<transport_detail::ReceiveThenReduce>(*this, peer, tag, data, bytes, dtype,
                                                               op);
}

}  // namespace dtrain::comm
