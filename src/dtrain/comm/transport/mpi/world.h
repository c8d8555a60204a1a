// The MPI world of this process: initialisation (once, MPI_THREAD_MULTIPLE), finalisation, and
// transports over all processes of an `mpirun -np N` (or `srun --mpi=pmix`) job. This header does
// not include <mpi.h>, so code above comm/ can start a world without seeing MPI.
//
// Lifetime: the first call that needs MPI calls MPI_Init_thread and registers MPI_Finalize to run
// at exit (unless MPI was initialised by someone else, who then finalises it). A process that
// fails should call mpi_abort(code) rather than return: mpirun then tears the whole job down at
// once, where a plain exit would leave the other processes waiting for their deadlines.
//
// Start-up watchdog: MPI_Init waits for every process of the job. If it has not returned by the
// start deadline (set_mpi_start_timeout, else DTRAIN_COMM_TIMEOUT_MS, else 60 s), this process
// prints one line naming itself (rank, size, host), the processes that have not all started and
// where the deadline came from, and exits with status 2; mpirun then ends the job.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dtrain/comm/transport/transport.h"

namespace dtrain::comm {

// True when the process was started by Open MPI's mpirun/mpiexec (OMPI_COMM_WORLD_SIZE) or by a
// PMI/PMIx launcher such as Slurm's srun (PMI_SIZE, PMIX_RANK). Reads the environment only.
bool launched_by_mpirun();

// This process's rank in the job from the launcher's environment (OMPI_COMM_WORLD_RANK, PMIX_RANK,
// PMI_RANK), without initialising MPI; 0 when not launched or not given.
int launcher_rank();

// A new transport over every process of the job, rank = MPI_COMM_WORLD rank. Initialises MPI on
// first use; throws CommError when MPI cannot be initialised, when it lacks MPI_THREAD_MULTIPLE,
// or after mpi_finalize(). Collective: every process must call it, in the same order relative to
// the other calls that create transports. Each transport has its own duplicated communicators, so
// messages left over in one (after a timeout) never reach another.
std::shared_ptr<Transport> mpi_world_transport();

// The start-up watchdog's deadline for a later first initialisation (0: the default above), and
// what sets it, named by the watchdog's message: "dtrain check --timeout",
// "parallel.comm_timeout_seconds".
void set_mpi_start_timeout(std::chrono::milliseconds timeout, std::string source);
// The same for the deadline of a run's waits (dtrain train: train::comm_options(config).timeout):
// named DTRAIN_COMM_TIMEOUT_MS (or the 60-s default) when it is default_comm_timeout()'s value,
// else parallel.comm_timeout_seconds.
void set_mpi_start_timeout(std::chrono::milliseconds timeout);

// MPI_COMM_WORLD rank and size (initialise MPI on first use).
int mpi_world_rank();
int mpi_world_size();

// MPI_Finalize now, if this process initialised MPI and has not finalised it; idempotent.
// Collective: every process must call it (as at a normal exit).
void mpi_finalize();

// MPI_Abort(MPI_COMM_WORLD, code): mpirun kills every process of the job; never returns.
[[noreturn]] void mpi_abort(int code);

}  // namespace dtrain::comm
