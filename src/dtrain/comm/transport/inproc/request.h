// A posted send or receive of the in-process transport; destroying it before completion cancels
// (a queued op leaves its queue; a matched one finishes its transfer first).
#pragma once

#include <memory>

#include "dtrain/comm/transport/inproc/pending_op.h"
#include "dtrain/comm/transport/inproc/world.h"
#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

class InprocTransport;

class InprocRequest : public Request {
 public:
  // Takes the caller's reference to `op`. Holds the posting rank's transport (and through it the
  // world) rather than the world itself: the world's reference count is shared by every rank's
  // thread, so counting on it per request would bounce its cache line between the cores.
  InprocRequest(std::shared_ptr<InprocTransport> transport, InprocWorld& world,
                inproc::PendingOp* op);
  ~InprocRequest() override;
  InprocRequest(const InprocRequest&) = delete;
  InprocRequest& operator=(const InprocRequest&) = delete;

  bool test() override;
  void wait(std::chrono::steady_clock::time_point deadline) override;

 private:
  std::shared_ptr<InprocTransport> transport_;
  InprocWorld& world_;
  inproc::PendingOp* op_;
};

// A send that completed as it was posted (a fast-box message, fast_box.h): nothing to wait for
// or cancel.
class InprocCompletedRequest final : public Request {
 public:
  bool test() override { return true; }
  void wait(std::chrono::steady_clock::time_point /*deadline*/) override {}
};

}  // namespace dtrain::comm
