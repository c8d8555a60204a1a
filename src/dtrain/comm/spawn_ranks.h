// Runs n ranks as threads of this process over one InprocWorld: the way tests (and `dtrain train
// --workers n`) start a world without MPI.
#pragma once

#include <chrono>
#include <functional>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

// Whether rank threads are bound to CPUs: rank r to the (r mod n)-th CPU this process may use, as
// mpirun's default --bind-to core does for np <= 2. kFromEnvironment reads DTRAIN_PIN_RANKS
// (default off); kWhenRanksFit pins when n is at most the CPUs this process may use (benchmarks,
// and training ranks with one compute thread each: unpinned threads get stacked on one core after
// wake-ups, sometimes for a whole run, docs/INPROC.md).
enum class RankPinning { kFromEnvironment, kWhenRanksFit, kNever };

// How long spawn_ranks waits for the other ranks after the first error before it leaves them
// running and rethrows.
inline constexpr std::chrono::milliseconds kRankGracePeriod{2000};

// Calls fn(communicator) on n threads, rank r's communicator on thread r. When a rank throws, the
// world is told (InprocWorld::abort) so that the others fail promptly instead of waiting for their
// deadlines; a rank that returns is marked as exited for the same reason. Either also ends the
// sleeps of sleep_unless_aborted on every rank thread (rank_threads.h). Without an error, joins
// all threads. After the first error (chronologically), waits at most `grace` for the other
// threads, detaches those still running (detached_rank_threads() counts them; the process must
// then end with std::_Exit, since they may still use what the caller is about to destroy), and
// rethrows that error with "rank r: " in front when the message does not already start with it
// (dtrain::Error types are kept; anything else becomes CommError).
void spawn_ranks(int n, const std::function<void(Communicator&)>& fn, CommOptions options = {},
                 RankPinning pinning = RankPinning::kFromEnvironment,
                 std::chrono::milliseconds grace = kRankGracePeriod);

}  // namespace dtrain::comm
