#include "dtrain/comm/algorithms/channel.h"

namespace dtrain::comm {

Channel::Channel(Transport& transport, std::uint64_t tag, Deadline deadline,
                 std::size_t segment_bytes)
    : transport_(transport), tag_(tag), deadline_(deadline), segment_bytes_(segment_bytes) {}

std::unique_ptr<Request> Channel::isend(int peer, const void* data, std::size_t bytes) {
  traffic_.bytes_sent += static_cast<std::int64_t>(bytes);
  traffic_.messages_sent += 1;
  auto request = transport_.isend(peer, tag_, data, bytes);
  request->describe_as(peer, true, bytes);
  return request;
}

std::unique_ptr<Request> Channel::irecv(int peer, void* data, std::size_t bytes) {
  traffic_.bytes_received += static_cast<std::int64_t>(bytes);
  traffic_.messages_received += 1;
  auto request = transport_.irecv(peer, tag_, data, bytes);
  request->describe_as(peer, false, bytes);
  return request;
}

std::unique_ptr<Request> Channel::irecv_reduce(int peer, void* data, std::int64_t count,
                                               DType dtype, ReduceOp op) {
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  traffic_.bytes_received += static_cast<std::int64_t>(bytes);
  traffic_.messages_received += 1;
  auto request = transport_.irecv_reduce(peer, tag_, data, bytes, dtype, op);
  request->describe_as(peer, false, bytes);
  return request;
}

void Channel::wait(Request& request) { wait_watched(request, deadline_, watch_); }

void Channel::wait_all(std::vector<std::unique_ptr<Request>>& requests) {
  for (auto& request : requests) wait(*request);
}

void Channel::send(int peer, const void* data, std::size_t bytes) {
  wait(*isend(peer, data, bytes));
}

void Channel::recv(int peer, void* data, std::size_t bytes) { wait(*irecv(peer, data, bytes)); }

void Channel::send_recv(int send_peer, const void* send_data, std::size_t send_bytes, int recv_peer,
                        void* recv_data, std::size_t recv_bytes) {
  auto receive = irecv(recv_peer, recv_data, recv_bytes);
  auto send_request = isend(send_peer, send_data, send_bytes);
  wait(*receive);
  wait(*send_request);
}

}  // namespace dtrain::comm
