// Runs this process's share of a world started by mpirun (or srun): W ranks as threads of each of
// the N processes, N x W ranks in all, rank = process x W + thread. With W = 1 the process is one
// rank over the MPI transport; with W > 1 the threads talk through the process's inproc world and
// MPI (HybridTransport). The counterpart of spawn_ranks for more than one process.
#pragma once

#include <functional>

#include "dtrain/comm/communicator.h"

namespace dtrain::comm {

// Collective over the processes: every process calls it with the same W. Calls fn(communicator)
// on W threads (on this thread when W = 1); a thread that throws aborts the process's inproc world
// so that its sibling threads fail promptly. Rethrows the first error. Other processes learn of a
// failure through their deadlines, or at once when the caller then calls mpi_abort (as `dtrain`
// does), which makes mpirun stop the job.
void spawn_process_ranks(int threads_per_process, const std::function<void(Communicator&)>& fn,
                         CommOptions options = {});

}  // namespace dtrain::comm
