// A posted send or receive of the in-process transport; destroying it before completion cancels.
#pragma once

#include <memory>

#include "dtrain/comm/transport/inproc/pending_op.h"
#include "dtrain/comm/transport/inproc/world.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocRequest : public Request {
 public:
  InprocRequest(std::shared_ptr<InprocWorld> world, std::shared_ptr<inproc::PendingOp> op);
  ~InprocRequest() override;
  InprocRequest(const InprocRequest&) = delete;
  InprocRequest& operator=(const InprocRequest&) = delete;

  bool test() override;
  void wait(std::chrono::steady_clock::time_point deadline) override;

 private:
  std::shared_ptr<InprocWorld> world_;
  std::shared_ptr<inproc::PendingOp> op_;
};

}  // namespace dtrain::comm
