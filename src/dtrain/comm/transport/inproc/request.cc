#include "dtrain/comm/transport/inproc/request.h"

#include "dtrain/comm/comm_error.h"

namespace dtrain::comm {

InprocRequest::InprocRequest(std::shared_ptr<InprocWorld> world,
                             std::shared_ptr<inproc::PendingOp> op)
    : world_(std::move(world)), op_(std::move(op)) {}

InprocRequest::~InprocRequest() { world_->cancel(op_); }

bool InprocRequest::test() {
  const inproc::OpState state = op_->state.load(std::memory_order_acquire);
  if (state == inproc::OpState::kFailed) throw CommError(op_->error);
  return state == inproc::OpState::kDone;
}

void InprocRequest::wait(std::chrono::steady_clock::time_point deadline) {
  world_->wait(*op_, deadline);
}

}  // namespace dtrain::comm
