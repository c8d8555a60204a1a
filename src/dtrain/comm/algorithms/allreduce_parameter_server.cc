// Single-master parameter-server allreduce (seed 003): every worker sends its whole buffer to
// rank 0, rank 0 adds them up in rank order (receiving the next buffer while it reduces the
// current one: double buffering), then sends the result back to every worker.
//
// Cost: the master's link carries everything: 2(P - 1)(alpha + N beta) + (P - 1) N gamma. The
// master receives (P - 1) N bytes and sends (P - 1) N; each worker sends N and receives N. It is
// the baseline that ring and sharded PS beat as P grows.
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_parameter_server(Channel& channel, void* data, std::int64_t count, DType dtype,
                                ReduceOp op) {
  const int ranks = channel.size();
  if (ranks == 1 || count == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(count) * dtype_size(dtype);
  constexpr int kMaster = 0;
  if (channel.rank() != kMaster) {
    channel.send(kMaster, data, bytes);
    channel.recv(kMaster, data, bytes);
    return;
  }
  std::vector<std::byte> buffers[2] = {std::vector<std::byte>(bytes),
                                       std::vector<std::byte>(bytes)};
  std::unique_ptr<Request> pending = channel.irecv(1, buffers[1].data(), bytes);
  for (int worker = 1; worker < ranks; ++worker) {
    channel.wait(*pending);
    std::vector<std::byte>& current = buffers[worker % 2];
    if (worker + 1 < ranks)
      pending = channel.irecv(worker + 1, buffers[(worker + 1) % 2].data(), bytes);
    reduce_into(data, current.data(), count, dtype, op);
  }
  std::vector<std::unique_ptr<Request>> sends;
  for (int worker = 1; worker < ranks; ++worker)
    sends.push_back(channel.isend(worker, data, bytes));
  channel.wait_all(sends);
}

}  // namespace dtrain::comm
