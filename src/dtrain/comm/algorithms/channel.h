// The point-to-point view one collective call gives its algorithm: this call's tag, its deadline
// and its traffic counters over a Transport. Algorithms use only this and the reduce kernels, so
// each is written once for every transport.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/comm/stall_watch.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

// Bytes and messages this rank moved in one call (what CommStats accumulates).
struct Traffic {
  std::int64_t bytes_sent = 0;
  std::int64_t bytes_received = 0;
  std::int64_t messages_sent = 0;
  std::int64_t messages_received = 0;
};

class Channel {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  // Every message of the call carries `tag`: FIFO matching per (source, tag) keeps the messages
  // of one call in order, and calls with different tags never mix.
  Channel(Transport& transport, std::uint64_t tag, Deadline deadline, std::size_t segment_bytes);

  int rank() const { return transport_.rank(); }
  // For algorithms that hand the whole call to the transport ("native").
  Transport& transport() { return transport_; }
  int size() const { return transport_.size(); }
  Deadline deadline() const { return deadline_; }
  // Largest message a pipelining algorithm posts; algorithms round it down to whole elements
  // (at least one, blocks.h segment_elements).
  std::size_t segment_bytes() const { return segment_bytes_; }
  const Traffic& traffic() const { return traffic_; }

  std::unique_ptr<Request> isend(int peer, const void* data, std::size_t bytes);
  std::unique_ptr<Request> irecv(int peer, void* data, std::size_t bytes);
  // Receives `count` elements and reduces them into `data` (Transport::irecv_reduce: fused on
  // transports that can read the sender's memory). Counted as a received message.
  std::unique_ptr<Request> irecv_reduce(int peer, void* data, std::int64_t count, DType dtype,
                                        ReduceOp op);
  // Waits for `request` until the deadline; with a stall watch, logs its warning once first
  // (the collective, its sequence number and algorithm, and the peer: stall_watch.h).
  void wait(Request& request);
  // Every wait of this channel warns through `watch` (null: none); it must outlive the channel.
  void set_stall_watch(StallWatch* watch) { watch_ = watch; }
  StallWatch* stall_watch() const { return watch_; }
  // Waits for all, in order; requests stay owned by the caller.
  void wait_all(std::vector<std::unique_ptr<Request>>& requests);

  void send(int peer, const void* data, std::size_t bytes);
  void recv(int peer, void* data, std::size_t bytes);
  // Posts both, then waits for both: the exchange step of ring and halving-doubling.
  void send_recv(int send_peer, const void* send_data, std::size_t send_bytes, int recv_peer,
                 void* recv_data, std::size_t recv_bytes);

 private:
  Transport& transport_;
  std::uint64_t tag_;
  Deadline deadline_;
  std::size_t segment_bytes_;
  Traffic traffic_;
  StallWatch* watch_ = nullptr;
};

}  // namespace dtrain::comm
