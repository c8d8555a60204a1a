// The program of kill_peer_test.sh: every rank runs ring allreduces of 4 MiB in a loop; after a
// few, rank 1 starts one more and kills itself with SIGKILL in the middle of it (no cleanup, no
// MPI_Finalize: what a crash or the OOM killer does). The survivors are inside collectives with a
// long deadline; mpirun must end them all and exit non-zero. Prints "rank r: killing myself" and
// "rank r: survived", the script reads neither: it checks mpirun's exit status, the time and the
// process table. Usage: dtrain_mpi_kill_peer <token> (the token lets the script find its ranks).
#include <csignal>
#include <cstdio>
#include <exception>
#include <vector>

#include "dtrain/base/dtype.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/comm/transport/mpi/world.h"

int main() {
  using namespace dtrain;
  try {
    comm::CommOptions options;
    options.timeout = std::chrono::seconds(120);  // the test must not end by a deadline
    comm::Communicator comm(comm::mpi_world_transport(), options);
    std::vector<float> data(1 << 20, 1.0f);
    for (int i = 0; i < 1000; ++i) {
      if (comm.rank() == 1 && i == 3) {
        comm::Work work =
            comm.allreduce_async(data.data(), 1 << 20, DType::kF32, comm::ReduceOp::kSum);
        std::fprintf(stderr, "rank 1: killing myself in the middle of allreduce #%d\n", i);
        std::raise(SIGKILL);
      }
      comm.allreduce(data.data(), 1 << 20, DType::kF32, comm::ReduceOp::kSum);
    }
    std::fprintf(stderr, "rank %d: survived\n", comm.rank());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    comm::mpi_abort(1);
  }
  comm::mpi_finalize();
  return 0;
}
