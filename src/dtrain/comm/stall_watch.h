// The stall warning of a wait with a deadline: a wait still running at the stall threshold logs
// one warning naming who waits, in what (the op and its sequence number) and for which peer, then
// waits on to its deadline. The collectives' channels (algorithms/channel.h) and the
// parameter-server client and server (ps/) warn through it, so every wait reads the same.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

// One call's watch, shared by the waits it makes: the first wait still running at `at` warns,
// the others wait silently. `what` is only called to format that warning.
struct StallWatch {
  std::chrono::steady_clock::time_point start;
  std::chrono::steady_clock::time_point at;
  std::chrono::milliseconds timeout{0};  // the call's, for "(the call fails at 60 s)"
  std::string_view label;                // "rank 0", as the call's errors begin
  std::function<std::string()> what;     // "allreduce #57 (ring, 1000 x f32, sum)"
  bool warned = false;
};

// Waits for `request` until `deadline` (CommTimeoutError after it). With a watch that has not
// warned and whose threshold comes before the deadline, a wait still running at the threshold
// logs "stall: <label> has waited X s in <what> for <peer> (the call fails at T s)" first.
// The peer and size come from Request::describe_as.
void wait_watched(Request& request, std::chrono::steady_clock::time_point deadline,
                  StallWatch* watch);

}  // namespace dtrain::comm
