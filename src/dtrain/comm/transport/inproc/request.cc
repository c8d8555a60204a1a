#include "dtrain/comm/transport/inproc/request.h"

#include "dtrain/comm/transport/inproc/transport.h"

namespace dtrain::comm {

InprocRequest::InprocRequest(std::shared_ptr<InprocTransport> transport, InprocWorld& world,
                             inproc::PendingOp* op)
    : transport_(std::move(transport)), world_(world), op_(op) {}

InprocRequest::~InprocRequest() {
  world_.cancel(op_);
  // The op is final: nobody reads its partner link any more.
  if (op_->partner != nullptr) inproc::release(op_->partner);
  inproc::release(op_);
}

bool InprocRequest::test() { return world_.test(op_); }

void InprocRequest::wait(std::chrono::steady_clock::time_point deadline) {
  world_.wait(op_, deadline);
}

}  // namespace dtrain::comm
