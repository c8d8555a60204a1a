#include "dtrain/comm/transport/inproc/transport.h"

#include "dtrain/base/error.h"
#include "dtrain/comm/transport/inproc/request.h"

namespace dtrain::comm {

InprocTransport::InprocTransport(std::shared_ptr<InprocWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {}

void InprocTransport::check_peer(int peer, const char* what) const {
  if (peer < 0 || peer >= world_->size()) {
    throw ConfigError(fmt::format("inproc rank {}: {} peer {} out of range [0, {})", rank_, what,
                                  peer, world_->size()));
  }
}

std::unique_ptr<Request> InprocTransport::isend(int peer, std::uint64_t tag, const void* data,
                                                std::size_t bytes) {
  check_peer(peer, "send");
  auto op = std::make_shared<inproc::PendingOp>();
  op->is_send = true;
  op->source = rank_;
  op->dest = peer;
  op->tag = tag;
  op->send_data = data;
  op->bytes = bytes;
  world_->post(op);
  return std::make_unique<InprocRequest>(world_, std::move(op));
}

std::unique_ptr<Request> InprocTransport::irecv(int peer, std::uint64_t tag, void* data,
                                                std::size_t bytes) {
  check_peer(peer, "recv");
  auto op = std::make_shared<inproc::PendingOp>();
  op->source = peer;
  op->dest = rank_;
  op->tag = tag;
  op->recv_data = data;
  op->bytes = bytes;
  world_->post(op);
  return std::make_unique<InprocRequest>(world_, std::move(op));
}

}  // namespace dtrain::comm
