#include "dtrain/comm/transport/mpi/world.h"

#include <cstdlib>
#include <mutex>

#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/transport/mpi/mpi_api.h"
#include "dtrain/comm/transport/mpi/transport.h"

namespace dtrain::comm {
namespace {

std::mutex& init_mutex() {
  static std::mutex mu;
  return mu;
}
bool initialised_here = false;  // guarded by init_mutex()

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

void finalize_at_exit() { mpi_finalize(); }

void ensure_initialised() {
  std::lock_guard<std::mutex> lock(init_mutex());
  if (mpi_finalized()) {
    throw CommError(
        "mpi transport: MPI was already finalised in this process; create every MPI "
        "transport before mpi_finalize()");
  }
  int initialised = 0;
  MPI_Initialized(&initialised);
  int provided = MPI_THREAD_SINGLE;
  if (initialised == 0) {
    mpi::check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread",
               "mpi transport");
    initialised_here = true;
    std::atexit(finalize_at_exit);
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    throw CommError(
        "mpi transport: the MPI library provides no MPI_THREAD_MULTIPLE (a communicator posts from "
        "its caller's and its async thread at once); use an Open MPI built with thread support");
  }
}

}  // namespace

bool launched_by_mpirun() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}) {
    if (const char* value = std::getenv(name); value != nullptr) return std::atoi(value);
  }
  return 0;
}

std::shared_ptr<Transport> mpi_world_transport() {
  ensure_initialised();
  return MpiTransport::create(MPI_COMM_WORLD);
}

int mpi_world_rank() {
  ensure_initialised();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int mpi_world_size() {
  ensure_initialised();
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

void mpi_finalize() {
  std::lock_guard<std::mutex> lock(init_mutex());
  if (!initialised_here || mpi_finalized()) return;
  MPI_Finalize();
}

void mpi_abort(int code) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised != 0 && !mpi_finalized()) MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace dtrain::comm
