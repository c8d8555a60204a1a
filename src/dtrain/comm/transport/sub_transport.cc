#include "dtrain/comm/transport/sub_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::comm {

std::shared_ptr<SubTransport> SubTransport::create(std::shared_ptr<Transport> parent,
                                                   const std::vector<int>& members,
                                                   std::uint64_t id) {
  if (!parent) throw ConfigError("SubTransport: null parent transport");
  if (id == 0 || id > kMaxCommunicatorId) {
    throw ConfigError(fmt::format(
        "SubTransport: communicator id {} out of range [1, {}]: too many sub-communicators", id,
        kMaxCommunicatorId));
  }
  std::vector<int> sorted = members;
  std::sort(sorted.begin(), sorted.end());
  if (sorted.empty() || sorted.front() < 0 || sorted.back() >= parent->size() ||
      std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    throw ConfigError(fmt::format(
        "SubTransport: members must be distinct ranks in [0, {}); got {} ranks from {} to {}",
        parent->size(), members.size(), sorted.empty() ? 0 : sorted.front(),
        sorted.empty() ? 0 : sorted.back()));
  }
  const auto self = std::find(members.begin(), members.end(), parent->rank());
  if (self == members.end()) {
    throw ConfigError(
        fmt::format("SubTransport: rank {} is not among the members", parent->rank()));
  }
  const int rank = static_cast<int>(self - members.begin());
  // Flatten a view of a view: compose the rank maps so every message goes straight to the world.
  std::shared_ptr<Transport> world = parent;
  std::vector<int> world_ranks = members;
  if (const auto* view = dynamic_cast<const SubTransport*>(parent.get())) {
    world = view->world_;
    for (int& r : world_ranks) r = view->world_rank(r);
  }
  return std::make_shared<SubTransport>(std::move(world), std::move(world_ranks), rank, id);
}

SubTransport::SubTransport(std::shared_ptr<Transport> world, std::vector<int> world_ranks, int rank,
                           std::uint64_t id)
    : world_(std::move(world)), world_ranks_(std::move(world_ranks)), rank_(rank), id_(id) {}

int SubTransport::to_world(int peer, const char* what) const {
  if (peer < 0 || peer >= size()) {
    throw ConfigError(fmt::format("sub-communicator rank {}: {}: peer {} out of range [0, {})",
                                  rank_, what, peer, size()));
  }
  return world_ranks_[static_cast<std::size_t>(peer)];
}

std::uint64_t SubTransport::world_tag(std::uint64_t tag) const {
  if ((tag & kCommunicatorIdMask) != 0) {
    throw InternalError(fmt::format(
        "SubTransport: tag {:#x} uses the communicator id bits 47..62 (Communicator tags never do)",
        tag));
  }
  return tag | (id_ << kCommunicatorIdShift);
}

std::unique_ptr<Request> SubTransport::isend(int peer, std::uint64_t tag, const void* data,
                                             std::size_t bytes) {
  return world_->isend(to_world(peer, "isend"), world_tag(tag), data, bytes);
}

std::unique_ptr<Request> SubTransport::irecv(int peer, std::uint64_t tag, void* data,
                                             std::size_t bytes) {
  return world_->irecv(to_world(peer, "irecv"), world_tag(tag), data, bytes);
}

std::unique_ptr<Request> SubTransport::irecv_reduce(int peer, std::uint64_t tag, void* data,
                                                    std::size_t bytes, DType dtype, ReduceOp op) {
  return world_->irecv_reduce(to_world(peer, "irecv_reduce"), world_tag(tag), data, bytes, dtype,
                              op);
}

}  // namespace dtrain::comm
