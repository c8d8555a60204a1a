#include "dtrain/comm/transport/mpi/world.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "dtrain/base/env.h"
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

std::chrono::milliseconds start_timeout_override{0};  // guarded by init_mutex()
std::string start_timeout_source;                     // guarded by init_mutex()

// The deadline without an override: DTRAIN_COMM_TIMEOUT_MS, else 60 s.
std::chrono::milliseconds environment_timeout() {
  const std::int64_t ms = env::get_int("DTRAIN_COMM_TIMEOUT_MS", 60000);
  return std::chrono::milliseconds(ms > 0 ? ms : 60000);
}

std::string environment_source() {
  return env::get_int("DTRAIN_COMM_TIMEOUT_MS", 0) > 0
             ? "DTRAIN_COMM_TIMEOUT_MS"
             : "the 60-s default (DTRAIN_COMM_TIMEOUT_MS, or dtrain train's "
               "parallel.comm_timeout_seconds, sets another)";
}

// MPI_Init waits for every process of the job (Open MPI's PMIx fence): one that never starts (an
// unreachable host, a wrong path, a crashed launch) leaves the others in it for ever, silently.
// The watchdog ends this process at the deadline with a line saying so; mpirun then ends the job.
class InitWatchdog {
 public:
  InitWatchdog(std::chrono::milliseconds timeout, std::string source)
      : source_(std::move(source)), thread_([this, timeout] { watch(timeout); }) {}
  ~InitWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      returned_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  InitWatchdog(const InitWatchdog&) = delete;
  InitWatchdog& operator=(const InitWatchdog&) = delete;

 private:
  void watch(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    if (cv_.wait_for(lock, timeout, [&] { return returned_; })) return;
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (rank == nullptr) rank = std::getenv("PMIX_RANK");
    const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
    if (size == nullptr) size = std::getenv("PMI_SIZE");
    char host[256] = "?";
    gethostname(host, sizeof(host) - 1);
    const int others = size != nullptr ? std::atoi(size) - 1 : -1;
    std::fprintf(stderr,
                 "error: process %s of %s (host %s, pid %d): MPI_Init has not returned after "
                 "%.3g s: the %s other process(es) of the job have not all started: a host may be "
                 "unreachable or a process failed to start; check the mpirun host list, that "
                 "dtrain exists at the same path on every host, and mpirun's own messages (the "
                 "deadline is %s)\n",
                 rank != nullptr ? rank : "?", size != nullptr ? size : "?", host,
                 static_cast<int>(getpid()), std::chrono::duration<double>(timeout).count(),
                 others >= 0 ? std::to_string(others).c_str() : "other", source_.c_str());
    std::fflush(stderr);
    std::_Exit(2);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool returned_ = false;
  const std::string source_;
  std::thread thread_;  // last: started once the fields above exist
};

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
    const bool overridden = start_timeout_override.count() > 0;
    const InitWatchdog watchdog(overridden ? start_timeout_override : environment_timeout(),
                                overridden ? start_timeout_source : environment_source());
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

void set_mpi_start_timeout(std::chrono::milliseconds timeout, std::string source) {
  std::lock_guard<std::mutex> lock(init_mutex());
  start_timeout_override = timeout;
  start_timeout_source = std::move(source);
}

void set_mpi_start_timeout(std::chrono::milliseconds timeout) {
  set_mpi_start_timeout(timeout, timeout == environment_timeout()
                                     ? environment_source()
                                     : "parallel.comm_timeout_seconds");
}

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
