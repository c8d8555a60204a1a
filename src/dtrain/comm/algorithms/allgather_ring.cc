// Ring allgather, the second half of ring allreduce and the allgather collective.
//
// Steps: rank r starts with block r (blocks.h). In step s = 0 .. P-2 it sends block (r - s) mod P
// to rank r + 1 and receives block (r - s - 1) mod P from rank r - 1 straight into place, so each
// block walks once around the ring. Blocks move in segments of Channel::segment_bytes.
//
// Cost: (P - 1) alpha + (P - 1)/P N beta. Bytes sent by rank r: N - |block r + 1|.
#include <cstddef>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::comm {

void allgather_ring(Channel& channel, void* data, std::int64_t count, DType dtype) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (ranks == 1 || count == 0) return;
  const std::size_t element = dtype_size(dtype);
  const std::int64_t segment = segment_elements(channel.segment_bytes(), element);
  const int next = ring_index(rank + 1, ranks);
  const int prev = ring_index(rank - 1, ranks);
  auto* bytes = static_cast<std::byte*>(data);

  std::vector<std::unique_ptr<Request>> requests;
  for (int step = 0; step < ranks - 1; ++step) {
    const int send_block = ring_index(rank - step, ranks);
    const int recv_block = ring_index(rank - step - 1, ranks);
    requests.clear();
    const std::int64_t recv_begin = block_begin(count, ranks, recv_block);
    const std::int64_t recv_size = block_size(count, ranks, recv_block);
    for (std::int64_t at = 0; at < recv_size; at += segment) {
      const std::int64_t n = std::min(segment, recv_size - at);
      requests.push_back(channel.irecv(prev,
                                       bytes + static_cast<std::size_t>(recv_begin + at) * element,
                                       static_cast<std::size_t>(n) * element));
    }
    const std::int64_t send_begin = block_begin(count, ranks, send_block);
    const std::int64_t send_size = block_size(count, ranks, send_block);
    for (std::int64_t at = 0; at < send_size; at += segment) {
      const std::int64_t n = std::min(segment, send_size - at);
      requests.push_back(channel.isend(next,
                                       bytes + static_cast<std::size_t>(send_begin + at) * element,
                                       static_cast<std::size_t>(n) * element));
    }
    // The block received now is the one sent in the next step.
    channel.wait_all(requests);
  }
}

}  // namespace dtrain::comm
