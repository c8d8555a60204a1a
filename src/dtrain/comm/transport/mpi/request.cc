#include "dtrain/comm/transport/mpi/request.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "dtrain/comm/comm_error.h"

namespace dtrain::comm {
namespace mpi {

using Clock = std::chrono::steady_clock;

// After spinning, yield for this long before sleeping: a peer that is a few segments behind is
// met without the 50 us wake-up latency of a sleep.
constexpr auto kYieldPhase = std::chrono::milliseconds(20);
constexpr auto kFirstSleep = std::chrono::microseconds(20);
constexpr auto kLongestSleep = std::chrono::microseconds(500);

bool poll_until(const std::function<bool()>& poll, Clock::time_point deadline) {
  for (int i = 0; i < kSpinPolls; ++i) {
    if (poll()) return true;
    if ((i & 127) == 127 && Clock::now() >= deadline) return false;
  }
  const Clock::time_point yield_until = Clock::now() + kYieldPhase;
  auto sleep = kFirstSleep;
  while (true) {
    if (poll()) return true;
    const Clock::time_point now = Clock::now();
    if (now >= deadline) return false;
    if (now < yield_until) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::min<Clock::duration>(sleep, deadline - now));
      sleep = std::min<std::chrono::microseconds>(sleep * 2, kLongestSleep);
    }
  }
}

namespace {

// Tests `request` once; true when it is complete (or MPI_REQUEST_NULL). An MPI error completes it
// too and is returned in `code`.
bool test_one(MPI_Request& request, int& code) {
  code = MPI_SUCCESS;
  if (request == MPI_REQUEST_NULL) return true;
  int flag = 0;
  code = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
  if (code != MPI_SUCCESS) {
    // Open MPI frees a request that completed with an error when it reports it.
    request = MPI_REQUEST_NULL;
    return true;
  }
  return flag != 0;
}

bool test_all_quietly(std::vector<MPI_Request>& requests) {
  bool done = true;
  for (auto& request : requests) {
    int code = MPI_SUCCESS;
    done = test_one(request, code) && done;
  }
  return done;
}

std::string size_mismatch(int source, int dest, std::uint64_t tag, std::uint64_t bytes,
                          std::size_t capacity) {
  return fmt::format(
      "process {} -> process {} (tag {:#x}): message of {} bytes does not fit the receive buffer "
      "of {} bytes; both sides must pass the same count and dtype",
      source, dest, tag, bytes, capacity);
}

}  // namespace
}  // namespace mpi

using mpi::kCancelGrace;
using mpi::WireHeader;

// ---------------------------------------------------------------------------------------------
// MpiSendRequest

MpiSendRequest::MpiSendRequest(std::shared_ptr<MpiTransport> transport, int peer, std::uint64_t tag,
                               const void* data, std::size_t bytes)
    : transport_(std::move(transport)), peer_(peer), tag_(tag), bytes_(bytes) {
  const int pieces = transport_->payload_pieces(bytes);
  const std::size_t staging_bytes = sizeof(WireHeader) + (pieces == 0 ? bytes : 0);
  staging_ = std::make_unique_for_overwrite<std::byte[]>(staging_bytes);
  WireHeader header{tag, bytes, mpi::kInlinePayload, mpi::kHeaderMagic};
  if (pieces > 0) header.payload_tag = transport_->reserve_payload_tags(peer, pieces);
  std::memcpy(staging_.get(), &header, sizeof(header));
  if (pieces == 0 && bytes > 0) std::memcpy(staging_.get() + sizeof(header), data, bytes);

  requests_.assign(static_cast<std::size_t>(1 + pieces), MPI_REQUEST_NULL);
  int code = MPI_Isend(staging_.get(), static_cast<int>(staging_bytes), MPI_BYTE, peer,
                       transport_->mpi_tag(tag), transport_->control_comm(tag), &requests_[0]);
  const auto* payload = static_cast<const std::byte*>(data);
  for (int i = 0; i < pieces && code == MPI_SUCCESS; ++i) {
    const std::size_t offset = static_cast<std::size_t>(i) * transport_->max_piece_bytes();
    const std::size_t n = std::min(transport_->max_piece_bytes(), bytes - offset);
    code = MPI_Isend(payload + offset, static_cast<int>(n), MPI_BYTE, peer,
                     transport_->payload_tag(header.payload_tag, i), transport_->data_comm(),
                     &requests_[static_cast<std::size_t>(1 + i)]);
  }
  if (code != MPI_SUCCESS) {
    error_ = fmt::format("{} failed: MPI_Isend: {}", describe(), mpi::error_string(code));
  }
}

MpiSendRequest::~MpiSendRequest() {
  if (std::all_of(requests_.begin(), requests_.end(),
                  [](MPI_Request r) { return r == MPI_REQUEST_NULL; })) {
    return;
  }
  // Open MPI cannot cancel a send: give it a moment to complete, then hand it to the transport.
  mpi::poll_until([&] { return mpi::test_all_quietly(requests_); },
                  std::chrono::steady_clock::now() + kCancelGrace);
  const std::shared_ptr<std::byte[]> staging(std::move(staging_));
  for (MPI_Request& request : requests_) {
    if (request != MPI_REQUEST_NULL) transport_->adopt_orphan(request, staging);
  }
}

std::string MpiSendRequest::describe() const {
  return fmt::format("process {}: send to process {} (tag {:#x}, {} bytes)", transport_->rank(),
                     peer_, tag_, bytes_);
}

bool MpiSendRequest::test() {
  if (!error_.empty()) throw CommError(error_);
  for (MPI_Request& request : requests_) {
    int code = MPI_SUCCESS;
    const bool done = mpi::test_one(request, code);
    if (code != MPI_SUCCESS) {
      error_ = fmt::format("{} failed: {}", describe(), mpi::error_string(code));
      throw CommError(error_);
    }
    if (!done) return false;
  }
  return true;
}

void MpiSendRequest::wait(std::chrono::steady_clock::time_point deadline) {
  if (!mpi::poll_until([&] { return test(); }, deadline)) {
    throw CommTimeoutError(fmt::format("{} did not complete before its deadline", describe()));
  }
}

// ---------------------------------------------------------------------------------------------
// MpiRecvRequest

MpiRecvRequest::MpiRecvRequest(std::shared_ptr<MpiTransport> transport, int peer, std::uint64_t tag,
                               void* data, std::size_t capacity)
    : transport_(std::move(transport)), peer_(peer), tag_(tag), data_(data), capacity_(capacity) {
  constexpr std::size_t kStagingBytes = sizeof(WireHeader) + MpiTransport::kInlineBytes;
  staging_ = std::make_unique_for_overwrite<std::byte[]>(kStagingBytes);
  const int code =
      MPI_Irecv(staging_.get(), static_cast<int>(kStagingBytes), MPI_BYTE, peer,
                transport_->mpi_tag(tag), transport_->control_comm(tag), &header_request_);
  if (code != MPI_SUCCESS) {
    header_request_ = MPI_REQUEST_NULL;
    fail(fmt::format("{} failed: MPI_Irecv: {}", describe(), mpi::error_string(code)));
  }
}

MpiRecvRequest::~MpiRecvRequest() {
  const auto deadline = std::chrono::steady_clock::now() + kCancelGrace;
  if (header_request_ != MPI_REQUEST_NULL) {
    // A header that arrives before the cancel takes effect is dropped with its message; a large
    // message's payload then never finds a receive, and its sender times out.
    MPI_Cancel(&header_request_);
    mpi::poll_until(
        [&] {
          int code = MPI_SUCCESS;
          return mpi::test_one(header_request_, code);
        },
        deadline);
    if (header_request_ != MPI_REQUEST_NULL) {
      transport_->adopt_orphan(header_request_, std::move(staging_));
    }
  }
  bool payload_active = false;
  for (MPI_Request& request : payload_requests_) {
    if (request != MPI_REQUEST_NULL) {
      MPI_Cancel(&request);
      payload_active = true;
    }
  }
  if (!payload_active) return;
  mpi::poll_until([&] { return mpi::test_all_quietly(payload_requests_); }, deadline);
  const std::shared_ptr<std::byte[]> drain(std::move(drain_));
  for (MPI_Request& request : payload_requests_) {
    // Matched and still copying after the grace period: MPI keeps writing into the user's buffer
    // (or the scratch buffer, which the transport keeps).
    if (request != MPI_REQUEST_NULL) transport_->adopt_orphan(request, drain);
  }
}

std::string MpiRecvRequest::describe() const {
  return fmt::format("process {}: recv from process {} (tag {:#x}, {} bytes)", transport_->rank(),
                     peer_, tag_, capacity_);
}

void MpiRecvRequest::fail(std::string error) {
  error_ = std::move(error);
  state_ = State::kFailed;
}

void MpiRecvRequest::on_header(int received_bytes) {
  WireHeader header{};
  if (received_bytes < static_cast<int>(sizeof(header))) {
    fail(
        fmt::format("{} failed: got a message of {} bytes, not a dtrain header; is another "
                    "program using this MPI communicator?",
                    describe(), received_bytes));
    return;
  }
  std::memcpy(&header, staging_.get(), sizeof(header));
  if (header.magic != mpi::kHeaderMagic) {
    fail(
        fmt::format("{} failed: got a message without the dtrain header (magic {:#x}); is another "
                    "program using this MPI communicator?",
                    describe(), header.magic));
    return;
  }
  if (header.tag != tag_) {
    fail(
        fmt::format("{} failed: it matched a message with tag {:#x} instead (a message of another "
                    "operation: left over after a timeout, or the ranks disagree about the order "
                    "of operations); no data was delivered",
                    describe(), header.tag));
    return;
  }
  message_bytes_ = header.bytes;
  if (header.payload_tag == mpi::kInlinePayload) {
    if (static_cast<std::uint64_t>(received_bytes) != sizeof(header) + header.bytes) {
      fail(fmt::format("{} failed: the header announces {} bytes but {} arrived", describe(),
                       header.bytes, received_bytes - static_cast<int>(sizeof(header))));
    } else if (header.bytes > capacity_) {
      fail(mpi::size_mismatch(peer_, transport_->rank(), tag_, header.bytes, capacity_));
    } else {
      if (header.bytes > 0) {
        std::memcpy(data_, staging_.get() + sizeof(header), static_cast<std::size_t>(header.bytes));
      }
      state_ = State::kDone;
    }
    staging_.reset();
    return;
  }
  staging_.reset();
  const std::size_t bytes = static_cast<std::size_t>(header.bytes);
  auto* out = static_cast<std::byte*>(data_);
  if (bytes > capacity_) {
    // Receive the whole payload into a scratch buffer, so that the sender completes, then fail.
    // Never let MPI truncate into the user's buffer: Open MPI 4.1.4 (vader) writes the whole
    // message past the receive count when it reports MPI_ERR_TRUNCATE (docs/MPI.md).
    size_error_ = mpi::size_mismatch(peer_, transport_->rank(), tag_, header.bytes, capacity_);
    drain_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    out = drain_.get();
  }
  const int pieces = transport_->payload_pieces(bytes);
  payload_requests_.assign(static_cast<std::size_t>(pieces), MPI_REQUEST_NULL);
  for (int i = 0; i < pieces; ++i) {
    const std::size_t offset = static_cast<std::size_t>(i) * transport_->max_piece_bytes();
    const std::size_t n = std::min(transport_->max_piece_bytes(), bytes - offset);
    const int code =
        MPI_Irecv(out + offset, static_cast<int>(n), MPI_BYTE, peer_,
                  transport_->payload_tag(header.payload_tag, i), transport_->data_comm(),
                  &payload_requests_[static_cast<std::size_t>(i)]);
    if (code != MPI_SUCCESS) {
      payload_requests_[static_cast<std::size_t>(i)] = MPI_REQUEST_NULL;
      fail(fmt::format("{} failed: MPI_Irecv of the payload: {}", describe(),
                       mpi::error_string(code)));
      return;
    }
  }
  state_ = State::kPayload;
}

bool MpiRecvRequest::test() {
  switch (state_) {
    case State::kDone: return true;
    case State::kFailed: throw CommError(error_);
    case State::kHeader: {
      int flag = 0;
      MPI_Status status;
      const int code = MPI_Test(&header_request_, &flag, &status);
      if (code != MPI_SUCCESS) {
        header_request_ = MPI_REQUEST_NULL;
        fail(fmt::format("{} failed: {}", describe(), mpi::error_string(code)));
        throw CommError(error_);
      }
      if (flag == 0) return false;
      int received = 0;
      MPI_Get_count(&status, MPI_BYTE, &received);
      on_header(received);
      if (state_ == State::kFailed) throw CommError(error_);
      if (state_ == State::kDone) return true;
      break;
    }
    case State::kPayload: break;
  }
  std::string payload_error;
  for (MPI_Request& request : payload_requests_) {
    int code = MPI_SUCCESS;
    const bool done = mpi::test_one(request, code);
    if (code != MPI_SUCCESS && payload_error.empty()) {
      payload_error = fmt::format("{} failed: {}", describe(), mpi::error_string(code));
    }
    if (!payload_error.empty()) error_ = payload_error;
    if (!done) return false;
  }
  if (!size_error_.empty()) {
    fail(size_error_);
    throw CommError(error_);
  }
  if (!error_.empty()) {
    fail(error_);
    throw CommError(error_);
  }
  state_ = State::kDone;
  return true;
}

void MpiRecvRequest::wait(std::chrono::steady_clock::time_point deadline) {
  if (mpi::poll_until([&] { return test(); }, deadline)) return;
  if (state_ == State::kPayload) {
    throw CommTimeoutError(
        fmt::format("{} did not complete before its deadline (the header arrived, the {} bytes of "
                    "payload did not)",
                    describe(), message_bytes_));
  }
  throw CommTimeoutError(fmt::format("{} did not complete before its deadline", describe()));
}

}  // namespace dtrain::comm
