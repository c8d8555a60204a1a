// Restart timeline (docs/FAULTS.md, "Where a restart's time goes"): with DTRAIN_TIMELINE=<file>
// set, the supervisor and the training process append one line per event of a restart to that
// file: "<wall clock, s since the epoch> <pid> <event>" (CLOCK_REALTIME, so that the lines of
// several processes, and a killer script's, order on one clock). Off (one getenv per event) when
// the variable is not set. Each line is one write(2) with O_APPEND, so concurrent writers never
// interleave within a line.
#pragma once

#include <string_view>

namespace dtrain {

// Whether DTRAIN_TIMELINE is set (a caller may skip formatting an event otherwise).
bool timeline_enabled();

// Appends "<now> <pid> <event>" to DTRAIN_TIMELINE's file, when it is set.
void timeline_mark(std::string_view event);

}  // namespace dtrain
