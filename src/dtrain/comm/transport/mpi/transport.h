// A Transport over an MPI communicator (Open MPI's MPI_Isend/MPI_Irecv): one rank per process.
// Its errors name processes ("process 0: recv from process 2 ..."): under HybridTransport (threads
// x processes) a rank of the run is a thread of one of them, numbered process x threads + thread.
//
// Wire protocol (request.h has the details). Every message starts with a 24-byte header
// (WireHeader: the full 64-bit tag, the size, where the payload is) sent on a *control*
// communicator under the MPI tag fold_tag(tag) (tag_map.h):
//   - at most kInlineBytes: the payload follows the header in the same MPI message (one copy into
//     a staging buffer on each side, no second message: small messages stay one MPI message);
//   - larger: the payload goes straight from the user's buffer as its own message(s) on the *data*
//     communicator, under an MPI tag taken from a per-destination counter and named in the header;
//     the receiver posts its receive into the user's buffer once the header is in (zero copies
//     above what MPI does: one, by CMA, between the processes of one machine).
// The receiver compares the header's tag with its own and the header's size with its buffer, so
// a wrong match or a size mismatch is a CommError naming both values, never wrong data.
//
// Four communicators are duplicated from the parent (MPI_Comm_dup, errors returned rather than
// fatal: MPI_ERRORS_RETURN): control for collectives, control for point-to-point (bit 63 of the
// tag), data, and one for the native MPI_Iallreduce. Thread safety: MPI_THREAD_MULTIPLE; any
// thread may post, each request is waited on by one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "dtrain/comm/transport/mpi/mpi_api.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class MpiTransport : public Transport, public std::enable_shared_from_this<MpiTransport> {
 public:
  // Payloads up to this many bytes travel inside the header's message.
  static constexpr std::size_t kInlineBytes = 8192;
  // Largest single MPI message of a payload (MPI counts are ints); larger payloads are split.
  static constexpr std::size_t kMaxPieceBytes = std::size_t{1} << 30;

  // Duplicates `parent` (collective over it). MPI must be initialised with MPI_THREAD_MULTIPLE
  // (world.h does it). `max_piece_bytes` (> kInlineBytes, <= kMaxPieceBytes): tests make it small
  // to exercise split payloads without gigabyte buffers; every rank must pass the same value.
  static std::shared_ptr<MpiTransport> create(MPI_Comm parent,
                                              std::size_t max_piece_bytes = kMaxPieceBytes);
  ~MpiTransport() override;
  MpiTransport(const MpiTransport&) = delete;
  MpiTransport& operator=(const MpiTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string_view name() const override { return "mpi"; }
  std::unique_ptr<Request> isend(int peer, std::uint64_t tag, const void* data,
                                 std::size_t bytes) override;
  std::unique_ptr<Request> irecv(int peer, std::uint64_t tag, void* data,
                                 std::size_t bytes) override;
  // MPI_Iallreduce in place on the native communicator, polled until `deadline`
  // (native_allreduce.cc).
  bool native_allreduce(void* data, std::int64_t count, DType dtype, ReduceOp op,
                        std::chrono::steady_clock::time_point deadline) override;

  // Used by the requests.
  MPI_Comm control_comm(std::uint64_t tag) const;
  MPI_Comm data_comm() const { return data_; }
  int mpi_tag(std::uint64_t tag) const;
  // The first of `pieces` consecutive payload tags (mod 2^tag_bits) for messages to `peer`.
  int reserve_payload_tags(int peer, int pieces);
  int payload_tag(int first, int piece) const { return (first + piece) & tag_mask_; }
  std::size_t max_piece_bytes() const { return max_piece_bytes_; }
  // Number of payload messages of a `bytes` message: 0 when it travels inline.
  int payload_pieces(std::size_t bytes) const;
  // An unfinished MPI request whose owner is gone: kept, with the buffer it uses, until MPI
  // completes it (reap() tests them when posting), so the buffer never dies under MPI.
  void adopt_orphan(MPI_Request request, std::shared_ptr<std::byte[]> buffer);

  MpiTransport(MPI_Comm parent, std::size_t max_piece_bytes);  // use create()

 private:
  struct Orphan {
    MPI_Request request;
    std::shared_ptr<std::byte[]> buffer;  // shared by the pieces of one message
  };
  void check_peer(int peer, const char* what) const;
  void reap_orphans();

  int rank_ = 0;
  int size_ = 0;
  int tag_bits_ = 0;
  int tag_mask_ = 0;
  std::size_t max_piece_bytes_ = kMaxPieceBytes;
  MPI_Comm control_collective_ = MPI_COMM_NULL;
  MPI_Comm control_p2p_ = MPI_COMM_NULL;
  MPI_Comm data_ = MPI_COMM_NULL;
  MPI_Comm native_ = MPI_COMM_NULL;
  std::unique_ptr<std::atomic<std::uint32_t>[]> next_payload_tag_;  // per destination rank

  std::atomic<bool> has_orphans_{false};
  std::mutex orphans_mu_;
  std::vector<Orphan> orphans_;  // guarded by orphans_mu_

  // Native allreduce: one at a time (MPI orders collectives per communicator by call order);
  // after a timeout the communicator holds a collective that never finished and is unusable.
  std::mutex native_mu_;
  bool native_broken_ = false;  // guarded by native_mu_
};

}  // namespace dtrain::comm
