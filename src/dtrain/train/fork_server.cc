#include "dtrain/train/fork_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "dtrain/base/log.h"
#include "dtrain/base/shared_scratch.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timeline.h"
#include "dtrain/tensor/gemm.h"

namespace dtrain::train {
namespace {

struct Channels {
  int command_fd = -1;  // the supervisor's requests ('f': fork a worker); EOF: it went away
  int ready_fd = -1;    // a worker's pid, when it is ready
  pid_t supervisor = -1;
};

// DTRAIN_FORK_SERVER, parsed; command_fd < 0 when unset or malformed.
Channels channels() {
  Channels c;
  const char* text = std::getenv("DTRAIN_FORK_SERVER");
  if (text == nullptr) return c;
  int command = -1;
  int ready = -1;
  long supervisor = -1;
  if (std::sscanf(text, "%d,%d,%ld", &command, &ready, &supervisor) != 3 || command < 0 ||
      ready < 0 || supervisor <= 0) {
    return c;
  }
  c.command_fd = command;
  c.ready_fd = ready;
  c.supervisor = static_cast<pid_t>(supervisor);
  return c;
}

// Set in a forked worker: it is the run from then on, not a template.
std::atomic<bool> forked_off{false};

// The stop signals (base/stop_request.h) and their handlers as the run installed them
// (std::signal: with SA_RESTART), for a woken worker.
constexpr int kStopSignals[] = {SIGTERM, SIGINT, SIGHUP};
struct sigaction stop_handlers[std::size(kStopSignals)] = {};

// While the template and its workers wait, a stop signal must end the wait: a handler with
// SA_RESTART would resume the template's read() and leave the stop flag set in every worker
// forked after it (which would then stop at its first step). Without it the wait returns EINTR.
void stop_signals_end_waits() {
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], nullptr, &stop_handlers[i]);
    struct sigaction ending = stop_handlers[i];
    ending.sa_flags &= ~SA_RESTART;
    sigaction(kStopSignals[i], &ending, nullptr);
  }
}

void set_name(const char* name) { prctl(PR_SET_NAME, name, 0, 0, 0); }

// The threads of this process (entries of /proc/self/task), or -1.
int thread_count() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return -1;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    if (entry->d_name[0] != '.') ++count;
  }
  closedir(dir);
  return count;
}

// The threads once joined threads have left /proc/self/task: pthread_join returns when the
// kernel clears the thread's id, early in its exit, and its entry goes a little later (longer on
// a loaded machine). Waits up to 200 ms for one thread.
int threads_after_joins() {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
  int threads = thread_count();
  while (threads != 1 && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    threads = thread_count();
  }
  return threads;
}

// In a new worker: waits until the middle process has exited and this one is the supervisor's
// child; false after 5 s or when another process adopted it.
bool adopted_by(pid_t supervisor) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (getppid() != supervisor) {
    if (getppid() == 1 || std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return true;
}

// The worker's side, after the second fork: ready, asleep until SIGUSR1, then the run.
void become_worker(const Channels& c, const std::function<void()>& in_worker) {
  forked_off.store(true);
  if (!adopted_by(c.supervisor)) _exit(0);
  // A worker that waits dies with the supervisor (checked again after the prctl: it may have died
  // in between).
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != c.supervisor) _exit(0);
  setpgid(0, 0);  // a process group of its own, as every child the supervisor starts
  if (in_worker) in_worker();
  const std::int64_t pid = getpid();
  timeline_mark("fork-server worker ready");
  if (write(c.ready_fd, &pid, sizeof(pid)) != static_cast<ssize_t>(sizeof(pid))) _exit(0);
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, SIGUSR1);
  if (stop_requested() != 0) _exit(0);  // a stop that came before the wait
  for (;;) {
    const int signal = sigwaitinfo(&wake, nullptr);
    if (signal == SIGUSR1) break;
    if (stop_requested() != 0) _exit(0);  // a stop signal: nothing to save
  }
  prctl(PR_SET_PDEATHSIG, 0, 0, 0, 0);
  pthread_sigmask(SIG_UNBLOCK, &wake, nullptr);
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    sigaction(kStopSignals[i], &stop_handlers[i], nullptr);
  }
  close(c.command_fd);
  close(c.ready_fd);
  // The run from here on is no template: nothing it starts may take the closed pipes for its own.
  unsetenv("DTRAIN_FORK_SERVER");
  set_name("dtrain");
  timeline_mark("fork-server worker woken");
}

}  // namespace

bool is_fork_template() { return !forked_off.load() && channels().command_fd >= 0; }

void name_fork_template_process() {
  if (is_fork_template()) set_name("dtrain-template");
}

void refuse_fork_template(const std::string& why) {
  log::warn("fork server: {}; restarts start a new process", why);
  std::fflush(stderr);
  _exit(0);
}

void serve_forks(const std::function<void()>& in_worker) {
  const Channels c = channels();
  if (c.command_fd < 0) return;
  // The template dies with the supervisor (and checks that it has not died already).
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != c.supervisor) _exit(0);
  // fork() copies the calling thread only: another thread's locks and work would be lost.
  if (const int threads = threads_after_joins(); threads != 1) {
    refuse_fork_template(
        fmt::format("the template runs {} threads where it forks, and a fork copies one", threads));
  }
  // Blocked here, so that every worker is born with SIGUSR1 blocked and waits for it in
  // sigwaitinfo; a wake-up that comes early is kept pending, not lost.
  sigset_t wake;
  sigemptyset(&wake);
  sigaddset(&wake, SIGUSR1);
  pthread_sigmask(SIG_BLOCK, &wake, nullptr);
  stop_signals_end_waits();
  if (stop_requested() != 0) _exit(0);
  timeline_mark("fork-server template ready");
  for (;;) {
    char request = 0;
    const ssize_t got = read(c.command_fd, &request, 1);
    if (got < 0 && errno == EINTR) {
      if (stop_requested() != 0) _exit(0);
      continue;
    }
    if (got != 1) _exit(0);  // the supervisor went away or dismissed the template
    if (request != 'f') continue;
    const pid_t middle = fork();
    if (middle == 0) {
      const pid_t worker = fork();
      if (worker != 0) _exit(worker < 0 ? 1 : 0);
      become_worker(c, in_worker);
      return;  // the run goes on in the worker
    }
    if (middle > 0) {
      int status = 0;
      while (waitpid(middle, &status, 0) < 0 && errno == EINTR) {
      }
    }
    // A failed fork sends no pid: the supervisor starts a new process at the next restart.
  }
}

void install_fork_scratch() {
  // Address space only: the arena takes pages as they are first written; past its end tensors use
  // the heap.
  constexpr std::size_t kArenaBytes = std::size_t{16} << 30;
  if (!shared_scratch::install(kArenaBytes)) {
    log::warn(
        "fork server: no shared scratch arena (mmap of {} GiB of address space failed: {}; with "
        "vm.overcommit_memory = 2 it counts in full); workers' first steps are cold",
        kArenaBytes >> 30, std::strerror(errno));
  }
}

void serve_forks_after_warm_up() {
  timeline_mark(
      fmt::format("template warmed up ({} MB of shared scratch)", shared_scratch::used() >> 20));
  // No thread may run across a fork: the compute pool's workers end here and are started again
  // in each forked worker.
  const int threads = compute_threads();
  set_compute_threads(1);
  tensor::stop_blas_threads();
  serve_forks([] { shared_scratch::populate(); });
  set_compute_threads(threads);
}

}  // namespace dtrain::train
