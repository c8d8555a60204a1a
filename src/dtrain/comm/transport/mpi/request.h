// The posted sends and receives of the mpi transport (private to transport/mpi/), and the polling
// wait every MPI request of the transport uses.
//
// A send posts its header message (with the payload inline when it is at most kInlineBytes) and,
// for a larger payload, the payload pieces on the data communicator; it completes when all have.
// A receive posts one receive for the header message into a staging buffer of
// sizeof(WireHeader) + kInlineBytes; when it arrives it checks the magic, the tag and the size,
// then copies an inline payload out, or posts the payload receives straight into the user's
// buffer under the MPI tags the header names. A payload larger than the buffer is received into a
// scratch buffer, so that the sender completes, and the receive fails naming both sizes. MPI's own
// truncation (MPI_ERR_TRUNCATE) is never relied on: Open MPI 4.1.4 writes the whole message past
// the receive count when it reports it.
//
// Waiting: MPI makes progress only inside MPI calls, so wait() polls MPI_Test: about
// kSpinPolls polls back to back (a few microseconds; a partner that is a copy behind), then
// sched_yield (the 2-core machine runs 4 ranks under --oversubscribe), then sleeps that double
// from 1 us up to 100 us. Each poll checks the deadline.
//
// Destruction before completion: receives are cancelled (MPI_Cancel works on unmatched receives);
// a header that arrived anyway is dropped. Sends cannot be cancelled in Open MPI: a small send has
// completed locally already; a large one is given kCancelGrace to complete, then it is adopted by
// the transport with its staging buffer (MpiTransport::adopt_orphan), and the user's buffer must
// outlive it (docs/MPI.md: after a timeout, end the process).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/comm/transport/mpi/mpi_api.h"
#include "dtrain/comm/transport/mpi/transport.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm::mpi {

inline constexpr std::uint32_t kHeaderMagic = 0x6474726e;  // "dtrn"
inline constexpr std::int32_t kInlinePayload = -1;

// The first bytes of every header message.
struct WireHeader {
  std::uint64_t tag;         // the full transport tag
  std::uint64_t bytes;       // the payload size
  std::int32_t payload_tag;  // kInlinePayload, or the MPI tag of the first payload piece
  std::uint32_t magic;       // kHeaderMagic
};
static_assert(sizeof(WireHeader) == 24);

inline constexpr int kSpinPolls = 2000;
inline constexpr std::chrono::milliseconds kCancelGrace{200};

// Calls `poll` until it returns true or `deadline` passes (then returns false), with the spin /
// yield / sleep backoff above.
bool poll_until(const std::function<bool()>& poll, std::chrono::steady_clock::time_point deadline);

}  // namespace dtrain::comm::mpi

namespace dtrain::comm {

class MpiSendRequest : public Request {
 public:
  MpiSendRequest(std::shared_ptr<MpiTransport> transport, int peer, std::uint64_t tag,
                 const void* data, std::size_t bytes);
  ~MpiSendRequest() override;
  MpiSendRequest(const MpiSendRequest&) = delete;
  MpiSendRequest& operator=(const MpiSendRequest&) = delete;

  bool test() override;
  void wait(std::chrono::steady_clock::time_point deadline) override;

 private:
  std::string describe() const;

  std::shared_ptr<MpiTransport> transport_;
  int peer_;
  std::uint64_t tag_;
  std::size_t bytes_;
  // The header message (header + inline payload); MPI reads it until the request completes.
  std::unique_ptr<std::byte[]> staging_;
  // [0]: the header message; [1..]: payload pieces. MPI_REQUEST_NULL once complete.
  std::vector<MPI_Request> requests_;
  std::string error_;  // set when an MPI call failed
};

class MpiRecvRequest : public Request {
 public:
  MpiRecvRequest(std::shared_ptr<MpiTransport> transport, int peer, std::uint64_t tag, void* data,
                 std::size_t capacity);
  ~MpiRecvRequest() override;
  MpiRecvRequest(const MpiRecvRequest&) = delete;
  MpiRecvRequest& operator=(const MpiRecvRequest&) = delete;

  bool test() override;
  void wait(std::chrono::steady_clock::time_point deadline) override;

 private:
  enum class State { kHeader, kPayload, kDone, kFailed };
  std::string describe() const;
  // Reads the arrived header: completes an inline message, or posts the payload receives.
  void on_header(int received_bytes);
  void fail(std::string error);

  std::shared_ptr<MpiTransport> transport_;
  int peer_;
  std::uint64_t tag_;
  void* data_;
  std::size_t capacity_;
  State state_ = State::kHeader;
  std::unique_ptr<std::byte[]> staging_;  // header + inline payload
  MPI_Request header_request_ = MPI_REQUEST_NULL;
  std::vector<MPI_Request> payload_requests_;  // MPI_REQUEST_NULL once complete
  std::uint64_t message_bytes_ = 0;            // from the header
  std::string size_error_;  // the payload did not fit: reported once the pieces are drained
  std::unique_ptr<std::byte[]> drain_;  // where a payload that does not fit is received
  std::string error_;
};

}  // namespace dtrain::comm
