#include "dtrain/comm/transport/inproc/transport.h"

#include "dtrain/base/env.h"
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

std::unique_ptr<Request> InprocTransport::post(inproc::PendingOp* op) {
  // The request owns the op's first reference; allocate it before the op becomes visible.
  auto request = std::make_unique<InprocRequest>(shared_from_this(), *world_, op);
  world_->post(op);
  return request;
}

namespace {

// The fast box (fast_box.h) carries messages of at most kFastBytes; DTRAIN_INPROC_FAST_BOX=0 sends
// everything through the lanes (for comparisons and debugging: docs/INPROC.md).
bool fast_box_enabled() {
  static const bool enabled = env::get_bool("DTRAIN_INPROC_FAST_BOX", true);
  return enabled;
}

}  // namespace

std::unique_ptr<Request> InprocTransport::isend(int peer, std::uint64_t tag, const void* data,
                                                std::size_t bytes) {
  check_peer(peer, "send");
  std::uint64_t number = 0;
  if (bytes <= inproc::kFastBytes && fast_box_enabled()) {
    if (world_->send_fast(rank_, peer, tag, data, bytes, &number)) {
      return std::make_unique<InprocCompletedRequest>();
    }
  } else {
    number = world_->next_number(rank_, peer);
  }
  auto* op = new inproc::PendingOp;
  op->number = number;
  op->is_send = true;
  op->source = rank_;
  op->dest = peer;
  op->tag = tag;
  op->send_data = data;
  op->bytes = bytes;
  return post(op);
}

std::unique_ptr<Request> InprocTransport::irecv(int peer, std::uint64_t tag, void* data,
                                                std::size_t bytes) {
  check_peer(peer, "recv");
  return post(new_receive(peer, tag, data, bytes));
}

inproc::PendingOp* InprocTransport::new_receive(int peer, std::uint64_t tag, void* data,
                                                std::size_t bytes) const {
  auto* op = new inproc::PendingOp;
  op->source = peer;
  op->dest = rank_;
  op->tag = tag;
  op->recv_data = data;
  op->bytes = bytes;
  return op;
}

std::unique_ptr<Request> InprocTransport::irecv_reduce(int peer, std::uint64_t tag, void* data,
                                                       std::size_t bytes, DType dtype,
                                                       ReduceOp op) {
  check_peer(peer, "recv-reduce");
  if (bytes % dtype_size(dtype) != 0) {
    throw ConfigError(fmt::format(
        "inproc rank {}: recv-reduce of {} bytes from rank {} is not a whole number of {} "
        "elements; pass count x element size",
        rank_, bytes, peer, dtype_name(dtype)));
  }
  inproc::PendingOp* pending = new_receive(peer, tag, data, bytes);
  pending->reduce = true;
  pending->dtype = dtype;
  pending->reduce_op = op;
  return post(pending);
}

}  // namespace dtrain::comm
