#include "dtrain/comm/stall_watch.h"

#include <fmt/format.h>

#include "dtrain/base/log.h"
#include "dtrain/comm/comm_error.h"

namespace dtrain::comm {

void wait_watched(Request& request, std::chrono::steady_clock::time_point deadline,
                  StallWatch* watch) {
  if (watch == nullptr || watch->warned || watch->at >= deadline) {
    request.wait(deadline);
    return;
  }
  try {
    request.wait(watch->at);
    return;
  } catch (const CommTimeoutError&) {
    // Past the stall threshold: say what this rank waits for, then wait on to the deadline.
  }
  watch->warned = true;
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - watch->start).count();
  const std::string peer =
      request.peer() < 0 ? std::string("a peer")
      : request.is_send()
          ? fmt::format("rank {} to take a message ({} bytes)", request.peer(), request.bytes())
          : fmt::format("a message from rank {} ({} bytes)", request.peer(), request.bytes());
  log::warn("stall: {} has waited {:.3g} s in {} for {} (the call fails at {:.3g} s)", watch->label,
            waited, watch->what ? watch->what() : std::string("a call"), peer,
            std::chrono::duration<double>(watch->timeout).count());
  request.wait(deadline);
}

}  // namespace dtrain::comm
