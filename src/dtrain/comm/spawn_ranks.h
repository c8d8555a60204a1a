// Runs n ranks as threads of this process over one InprocWorld: the way tests (and `dtrain train
// --workers n`) start a world without MPI.
#pragma once

#include <functional>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

// Whether rank threads are bound to CPUs: rank r to the (r mod n)-th CPU this process may use, as
// mpirun's default --bind-to core does for np <= 2. kFromEnvironment reads DTRAIN_PIN_RANKS
// (default off); kWhenRanksFit pins when n is at most the CPUs this process may use (benchmarks,
// and training ranks with one compute thread each: unpinned threads get stacked on one core after
// wake-ups, sometimes for a whole run, docs/INPROC.md).
enum class RankPinning { kFromEnvironment, kWhenRanksFit, kNever };

// Calls fn(communicator) on n threads, rank r's communicator on thread r. When a rank throws, the
// world is told (InprocWorld::abort) so that the others fail promptly instead of waiting for their
// deadlines; a rank that returns is marked as exited for the same reason. Joins all threads, then
// rethrows the first error to happen (chronologically), with "rank r: " in front when the message
// does not already start with it (dtrain::Error types are kept; anything else becomes
// CommError).
void spawn_ranks(int n, const std::function<void(Communicator&)>& fn, CommOptions options = {},
                 RankPinning pinning = RankPinning::kFromEnvironment);

}  // namespace dtrain::comm
