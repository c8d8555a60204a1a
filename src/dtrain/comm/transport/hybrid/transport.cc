#include "dtrain/comm/transport/hybrid/transport.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::comm {

HybridTransport::HybridTransport(std::shared_ptr<Transport> local,
                                 std::vector<std::vector<std::shared_ptr<Transport>>> links)
    : local_(std::move(local)), links_(std::move(links)) {
  thread_ = local_->rank();
  threads_ = local_->size();
  if (static_cast<int>(links_.size()) != threads_) {
    throw InternalError(fmt::format("HybridTransport: {} threads but a {}-row link table", threads_,
                                    links_.size()));
  }
  for (const auto& row : links_) {
    if (static_cast<int>(row.size()) != threads_) {
      throw InternalError("HybridTransport: the link table must be square");
    }
    for (const auto& link : row) {
      if (link->size() != links_[0][0]->size() || link->rank() != links_[0][0]->rank()) {
        throw InternalError("HybridTransport: links of different worlds");
      }
    }
  }
  process_ = links_[0][0]->rank();
  processes_ = links_[0][0]->size();
}

void HybridTransport::check_peer(int peer) const {
  if (peer < 0 || peer >= size()) {
    throw ConfigError(
        fmt::format("rank {}: peer {} is outside the {} ranks ({} processes x {} "
                    "threads)",
                    rank(), peer, size(), processes_, threads_));
  }
}

std::unique_ptr<Request> HybridTransport::isend(int peer, std::uint64_t tag, const void* data,
                                                std::size_t bytes) {
  check_peer(peer);
  const int process = peer / threads_;
  const int thread = peer % threads_;
  if (process == process_) return local_->isend(thread, tag, data, bytes);
  return links_[static_cast<std::size_t>(thread_)][static_cast<std::size_t>(thread)]->isend(
      process, tag, data, bytes);
}

std::unique_ptr<Request> HybridTransport::irecv(int peer, std::uint64_t tag, void* data,
                                                std::size_t bytes) {
  check_peer(peer);
  const int process = peer / threads_;
  const int thread = peer % threads_;
  if (process == process_) return local_->irecv(thread, tag, data, bytes);
  return links_[static_cast<std::size_t>(thread)][static_cast<std::size_t>(thread_)]->irecv(
      process, tag, data, bytes);
}

}  // namespace dtrain::comm
