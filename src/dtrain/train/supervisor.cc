#include "dtrain/train/supervisor.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>
#include <thread>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/timeline.h"
#include "dtrain/base/timer.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/config.h"
#include "dtrain/train/memory_checkpoint.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxBackoffSeconds = 30.0;
// How often the supervisor looks at its child (about 0.1% of a core's time spent looking); a death
// is seen at once (SIGCHLD ends the wait, see child_signal_read_fd), this is for the rest (stop
// requests, upkeep).
constexpr auto kPoll = std::chrono::milliseconds(10);
// A wait between two looks that lasted this long (a hundred polls) means the supervisor was not
// running: stopped (SIGSTOP, a job-wide suspend) or kept off the CPU that long (wait_child).
constexpr auto kPausedGap = std::chrono::seconds(1);

// The fd a standby reads its activation from (standby.h): the pipe's read end, dup2-ed here; a
// fork server's template reads its requests there and writes its workers' pids to the next one.
constexpr int kStandbyFd = 3;

// Starts `argv` with the supervisor's environment plus DTRAIN_ERROR_FILE and `extra_env`; returns
// its pid. `fds`: pipe ends the child gets as fds 3, 4, ... (dup2-ed; all others the supervisor
// opens are close-on-exec). `stderr_fd` >= 0: the child's stderr.
pid_t start_child(const std::vector<std::string>& argv, const std::string& error_file,
                  const std::vector<int>& fds = {}, const std::vector<std::string>& extra_env = {},
                  int stderr_fd = -1) {
  std::vector<char*> args = env::c_strings(argv);
  std::vector<std::string> env_strings =
      env::environment_without({"DTRAIN_ERROR_FILE", "DTRAIN_STANDBY_FD", "DTRAIN_FORK_SERVER"});
  env_strings.push_back("DTRAIN_ERROR_FILE=" + error_file);
  env_strings.insert(env_strings.end(), extra_env.begin(), extra_env.end());
  std::vector<char*> env = env::c_strings(env_strings);
  // The child gets a process group of its own: a Ctrl-C at the terminal or a scheduler's signal
  // to the supervisor's group reaches the supervisor alone, which passes it on once. Delivered to
  // both, the child would see the signal twice, and its second (the default action) would end it
  // before the checkpoint its first asked for.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  // The pipes are opened close-on-exec, so that only this child holds its ends (dup2 clears the
  // flag on the copy) and no other child holds the supervisor's ends (a standby or a template
  // sees EOF when the supervisor goes away).
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (std::size_t i = 0; i < fds.size(); ++i) {
    posix_spawn_file_actions_adddup2(&actions, fds[i], kStandbyFd + static_cast<int>(i));
  }
  if (stderr_fd >= 0) posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  }
  timeline_mark(fmt::format("supervisor started pid {}", pid));
  return pid;
}

// A warm standby: its pid, the write end of its activation pipe, and the command it runs.
struct Standby {
  pid_t pid = -1;
  int fd = -1;
  std::vector<std::string> command;
  std::string error_file;  // its own DTRAIN_ERROR_FILE: a failing standby must not pose as the run
};

Standby start_standby(const std::vector<std::string>& command, const std::string& error_file) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(
        fmt::format("supervisor: cannot make the warm standby's pipe: {}", std::strerror(errno)));
  }
  Standby standby;
  try {
    standby.pid = start_child(command, error_file, {fds[0]},
                              {fmt::format("DTRAIN_STANDBY_FD={}", kStandbyFd)});
  } catch (...) {
    close(fds[0]);
    close(fds[1]);
    throw;
  }
  close(fds[0]);
  standby.fd = fds[1];
  standby.command = command;
  standby.error_file = error_file;
  return standby;
}

// Reaps `pid`, retrying when a signal interrupts the wait.
void reap(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
}

// Ends a standby that is not needed: its pipe closed and SIGKILL (it holds nothing to save: it
// has read no checkpoint), then reaped.
void dismiss(Standby& standby) {
  if (standby.pid < 0) return;
  if (standby.fd >= 0) close(standby.fd);
  kill(standby.pid, SIGKILL);
  reap(standby.pid);
  std::error_code ec;
  fs::remove(standby.error_file, ec);
  standby = Standby{};
}

// A fork server (fork_server.h): the template, the pipes to it, the command it runs, and the
// worker it forked that is ready to be woken.
struct ForkServer {
  pid_t pid = -1;
  int command_fd = -1;  // write end: 'f' asks for a worker
  int ready_fd = -1;    // read end (non-blocking): a ready worker's pid
  std::vector<std::string> command;
  std::string error_file;  // its own DTRAIN_ERROR_FILE, inherited by its workers
  pid_t ready = -1;        // a forked worker waiting for SIGUSR1
  bool asked = false;      // a worker was asked for and has not said it is ready
  Stopwatch since_asked;   // a request the template never answered is asked again (kAskAgain)
};

// A worker asked for and not ready after this long was lost (a failed fork, a worker killed while
// it mapped the arena): the supervisor asks again instead of serving no restart by fork again.
constexpr double kAskAgainSeconds = 30.0;

ForkServer start_fork_server(const std::vector<std::string>& command,
                             const std::string& error_file) {
  int requests[2];
  int replies[2];
  if (pipe2(requests, O_CLOEXEC) != 0) {
    throw Error(
        fmt::format("supervisor: cannot make the fork server's pipe: {}", std::strerror(errno)));
  }
  if (pipe2(replies, O_CLOEXEC) != 0) {
    const int error = errno;
    close(requests[0]);
    close(requests[1]);
    throw Error(
        fmt::format("supervisor: cannot make the fork server's pipe: {}", std::strerror(error)));
  }
  // The supervisor looks at its end at each poll; the workers' end blocks (8 bytes at a time).
  fcntl(replies[0], F_SETFL, O_NONBLOCK);
  ForkServer server;
  try {
    server.pid = start_child(
        command, error_file, {requests[0], replies[1]},
        {fmt::format("DTRAIN_FORK_SERVER={},{},{}", kStandbyFd, kStandbyFd + 1, getpid())});
  } catch (...) {
    for (const int fd : {requests[0], requests[1], replies[0], replies[1]}) close(fd);
    throw;
  }
  close(requests[0]);
  close(replies[1]);
  server.command_fd = requests[1];
  server.ready_fd = replies[0];
  server.command = command;
  server.error_file = error_file;
  return server;
}

// Ends a fork server: its ready worker killed and reaped, its pipe closed (the template exits at
// EOF), the template killed and reaped.
void dismiss(ForkServer& server) {
  if (server.ready > 0) {
    kill(server.ready, SIGKILL);
    reap(server.ready);
  }
  if (server.command_fd >= 0) close(server.command_fd);
  if (server.ready_fd >= 0) close(server.ready_fd);
  if (server.pid > 0) {
    kill(server.pid, SIGKILL);
    reap(server.pid);
  }
  std::error_code ec;
  fs::remove(server.error_file, ec);
  server = ForkServer{};
}

// The self-pipe of SIGCHLD: its handler writes a byte, which ends wait_child's poll at once
// whenever the child died after its last look (made once per process by make_child_signal_pipe,
// before the handler is installed; non-blocking, close-on-exec). The handler reads the write end
// from a lock-free atomic, nothing else.
int child_signal_read_fd = -1;
std::atomic<int> child_signal_write_fd{-1};
static_assert(std::atomic<int>::is_always_lock_free, "the SIGCHLD handler needs a lock-free fd");

void make_child_signal_pipe() {
  if (child_signal_read_fd >= 0) return;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw InternalError(fmt::format("supervisor: pipe2 failed: {}", std::strerror(errno)));
  }
  child_signal_read_fd = fds[0];
  child_signal_write_fd.store(fds[1]);
}

void on_child_signal(int) {
  const int saved = errno;
  const int fd = child_signal_write_fd.load(std::memory_order_relaxed);
  const char byte = 'c';
  if (fd >= 0) {
    [[maybe_unused]] const ssize_t written = write(fd, &byte, 1);  // full: fine
  }
  errno = saved;
}

// A child stopped (SIGSTOP, SIGTSTP) for longer than the run's deadline, which the supervisor
// killed.
struct StoppedKill {
  bool killed = false;
  std::string cause;  // "the training process 123 was stopped (SIGSTOP) for 3.0 s, past ..."
};

// Waits for `pid`, passing on the first SIGTERM / SIGINT / SIGHUP the supervisor receives; returns
// the wait status and sets `forwarded` to the signal passed on (0: none). `grow`: when it returns
// true, the child is asked to stop (SIGTERM) once, and `growing` is set. `upkeep`: called at each
// look (the warm standby's upkeep). `stopped_limit` > 0: a child that stays stopped that long is
// killed (SIGKILL) and `stopped` says so: its ranks are threads of that one process, so no
// deadline of theirs can fire while it is stopped, and nothing else would ever end the wait.
// The stop is timed over the supervisor's own normal looks only: when far more than a poll
// (kPausedGap) passed since the last look, the supervisor itself was not running (stopped with its
// child by a job-wide suspend: Slurm's, a script that stops and continues the job's pids), and the
// child's stop starts over from that look (it is continued with the supervisor, or it is caught a
// limit later). Only the wait between looks counts: a pause during the upkeep or a grow probe (a
// few milliseconds; a probe may take seconds) is taken for the supervisor's work.
int wait_child(pid_t pid, int& forwarded, const std::function<bool()>& grow, bool& growing,
               const std::function<void()>& upkeep, double stopped_limit,
               const std::string& stopped_limit_name, StoppedKill& stopped) {
  forwarded = 0;
  growing = false;
  stopped = StoppedKill{};
  // WUNTRACED / WCONTINUED report the child's stops and continues (once each) besides its end.
  const int flags = WNOHANG | (stopped_limit > 0 ? WUNTRACED | WCONTINUED : 0);
  using Clock = std::chrono::steady_clock;
  // While the child is stopped: since when (a plain flag and time point, not an optional
  // Stopwatch, which GCC 12 at -O1 takes for maybe uninitialized).
  bool is_stopped = false;
  Clock::time_point stopped_since{};
  const auto stopped_seconds = [&] {
    return std::chrono::duration<double>(Clock::now() - stopped_since).count();
  };
  int stop_signal = 0;
  Clock::time_point waiting_since = Clock::now();  // the start of the wait since the last look
  for (;;) {
    const Clock::duration waited = Clock::now() - waiting_since;
    if (upkeep) upkeep();
    if (!growing && forwarded == 0 && grow && grow()) {
      growing = true;
      kill(pid, SIGTERM);
    }
    int status = 0;
    const pid_t done = waitpid(pid, &status, flags);
    if (done == pid) {
      if (WIFSTOPPED(status)) {
        is_stopped = true;
        stopped_since = Clock::now();
        stop_signal = WSTOPSIG(status);
      } else if (WIFCONTINUED(status)) {
        is_stopped = false;
      } else {
        return status;
      }
    }
    if (done < 0 && errno != EINTR) {
      throw InternalError(fmt::format("waitpid({}) failed: {}", pid, std::strerror(errno)));
    }
    if (is_stopped && !stopped.killed && waited > kPausedGap) {
      log::info(
          "supervisor: it was not running itself for {:.1f} s (stopped with its child?): the "
          "training process {} counts as stopped from now",
          std::chrono::duration<double>(waited).count(), pid);
      stopped_since = Clock::now();
    }
    if (is_stopped && !stopped.killed && stopped_seconds() >= stopped_limit) {
      const char* name = sigabbrev_np(stop_signal);
      stopped.cause =
          fmt::format("the training process {} was stopped (SIG{}) for {:.1f} s, past {}", pid,
                      name != nullptr ? name : "?", stopped_seconds(), stopped_limit_name);
      stopped.killed = true;
      log::warn("supervisor: {}: killing it (SIGKILL)", stopped.cause);
      kill(pid, SIGKILL);  // ends a stopped process too; its end is reaped above
    }
    if (forwarded == 0 && stop_requested() != 0) {
      forwarded = stop_requested();
      kill(pid, forwarded);
    }
    // Up to kPoll, or until a SIGCHLD's byte is in the pipe: one that came since the waitpid
    // above is seen at once too (a sleep that a signal interrupts would miss it and sleep on).
    pollfd wake{child_signal_read_fd, POLLIN, 0};
    waiting_since = Clock::now();
    poll(&wake, 1, static_cast<int>(kPoll.count()));
    char drained[64];
    while (read(wake.fd, drained, sizeof(drained)) > 0) {
    }
  }
}

// The stderr of a launcher child (mpirun): mpirun names the process that died ("mpirun noticed
// that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).") there alone, not in the
// file of `error:` lines the ranks write. It goes to a file of the run folder, <run>/mpirun.stderr
// (appended, a header line before each attempt), not through a pipe: a supervisor killed during
// the run (kill -9) loses none of what the job writes after it, and nothing mpirun's processes
// write after mpirun ended is cut off. The supervisor copies the file's new bytes to its own stderr
// at each look, and reads mpirun's line there.
class LauncherStderr {
 public:
  explicit LauncherStderr(std::string path) : path_(std::move(path)) {
    // Read from the end the file has now: what an earlier supervisor's attempts wrote is not
    // shown again.
    read_fd_ = open(path_.c_str(), O_RDONLY | O_CREAT | O_CLOEXEC, 0644);
    if (read_fd_ < 0) {
      throw Error(fmt::format("supervisor: cannot open {} for mpirun's stderr: {}", path_,
                              std::strerror(errno)));
    }
    lseek(read_fd_, 0, SEEK_END);
  }
  ~LauncherStderr() {
    close(read_fd_);
    if (write_fd_ >= 0) close(write_fd_);
  }
  LauncherStderr(const LauncherStderr&) = delete;
  LauncherStderr& operator=(const LauncherStderr&) = delete;

  // Before an attempt starts: copies what the last one's processes wrote since its end, writes
  // `header` (a line) to the file, and returns the fd the child gets as its stderr (append-only).
  int begin_attempt(const std::string& header) {
    pump();
    death_.clear();
    partial_.clear();
    if (write_fd_ >= 0) close(write_fd_);  // an attempt that did not start
    write_fd_ = open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (write_fd_ < 0) {
      throw Error(fmt::format("supervisor: cannot open {} for mpirun's stderr: {}", path_,
                              std::strerror(errno)));
    }
    // The header is the file's alone: the copy to stderr starts after it.
    if (write(write_fd_, header.data(), header.size()) == static_cast<ssize_t>(header.size())) {
      const off_t after = lseek(write_fd_, 0, SEEK_CUR);  // O_APPEND: the end of this write
      if (after >= 0) skip_until_ = after;
    }
    return write_fd_;
  }
  // After the start: only the child holds its stderr.
  void started() {
    close(write_fd_);
    write_fd_ = -1;
  }
  // Copies what the child wrote to the file since the last call to stderr, and keeps the first
  // line of this attempt that names a process a signal ended; does not block.
  void pump() {
    char buffer[16384];
    ssize_t got = 0;
    for (;;) {
      const off_t at = lseek(read_fd_, 0, SEEK_CUR);
      got = read(read_fd_, buffer, sizeof(buffer));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) break;
      const char* data = buffer;
      std::size_t size = static_cast<std::size_t>(got);
      if (at >= 0 && at < skip_until_) {
        // The header (and what a process left behind appended in the instant between the pump
        // above and it: in the file only).
        const std::size_t skip = std::min(size, static_cast<std::size_t>(skip_until_ - at));
        data += skip;
        size -= skip;
      }
      for (std::size_t done = 0; done < size;) {
        const ssize_t wrote = write(STDERR_FILENO, data + done, size - done);
        if (wrote < 0 && errno == EINTR) continue;
        if (wrote <= 0) break;  // no terminal left (SIGHUP): the text stays in the file alone
        done += static_cast<std::size_t>(wrote);
      }
      partial_.append(data, size);
      std::size_t newline = 0;
      while ((newline = partial_.find('\n')) != std::string::npos) {
        const std::string_view line(partial_.data(), newline);
        // The first: with several processes killed (the OOM killer's round), it is the cause.
        if (death_.empty() && line.find("process rank ") != std::string_view::npos &&
            line.find("exited on signal") != std::string_view::npos) {
          death_ = std::string(line);
        }
        partial_.erase(0, newline + 1);
      }
      if (partial_.size() > 4096) partial_.clear();  // no line of mpirun's is that long
    }
  }
  // This attempt's first line of mpirun's naming a process that a signal ended, or "".
  const std::string& death() const { return death_; }

 private:
  std::string path_;
  int read_fd_ = -1;
  int write_fd_ = -1;
  off_t skip_until_ = 0;  // the end of the last header: bytes before it are not copied again
  std::string partial_;
  std::string death_;
};

// The last line of `path` that starts with "error:", or "".
std::string last_error_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::string last;
  while (std::getline(in, line)) {
    if (line.rfind("error:", 0) == 0) last = line;
  }
  return last;
}

// The exit status the supervisor ends with for a child that ended with `status`.
int exit_code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 3;
}

}  // namespace

std::string now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    const char* name = sigabbrev_np(signal);
    return fmt::format("killed by signal {} (SIG{})", signal, name != nullptr ? name : "?");
  }
  return fmt::format("wait status {}", status);
}

bool restartable(int status) {
  if (WIFSIGNALED(status)) {
    // A stop the child was asked for ends supervision (SIGHUP: its terminal went away); any other
    // signal is a death to mend.
    return WTERMSIG(status) != SIGTERM && WTERMSIG(status) != SIGINT && WTERMSIG(status) != SIGHUP;
  }
  if (!WIFEXITED(status)) return false;
  const int code = WEXITSTATUS(status);
  return !(code == 0 || code == 1 || code == 2 || code == 128 + SIGTERM || code == 128 + SIGINT ||
           code == 128 + SIGHUP);
}

std::int64_t last_logged_step(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return -1;
  const std::int64_t size = in.tellg();
  // The newest records are at the end: read a window of the tail, twice as long each time it
  // holds no step record, so that a restart costs the same at step 100 as at step 1,000,000.
  std::string window;
  for (std::int64_t length = std::min<std::int64_t>(size, 64 << 10);; length *= 2) {
    length = std::min(length, size);
    window.resize(static_cast<std::size_t>(length));
    in.clear();
    in.seekg(size - length);
    in.read(window.data(), length);
    window.resize(static_cast<std::size_t>(in.gcount()));
    // Lines from the last to the first; a line cut by the window's start is not whole.
    std::size_t end = window.size();
    while (end > 0) {
      const std::size_t newline = window.rfind('\n', end - 1);
      const bool whole = newline != std::string::npos || length == size;
      if (!whole) break;
      const std::size_t begin = newline == std::string::npos ? 0 : newline + 1;
      if (end > begin) {
        const auto record = nlohmann::json::parse(
            window.begin() + static_cast<std::ptrdiff_t>(begin),
            window.begin() + static_cast<std::ptrdiff_t>(end), nullptr, /*allow_exceptions=*/false);
        if (!record.is_discarded() && record.contains("step") &&
            record["step"].is_number_integer()) {
          return record["step"].get<std::int64_t>();
        }
      }
      if (newline == std::string::npos) break;
      end = newline;
    }
    if (length == size) return -1;
  }
}

int rank_named_in(const std::string& error_line) {
  // The number after the first of `keys` found in the line, or -1.
  const auto number_after = [&](std::initializer_list<std::string_view> keys) {
    for (const std::string_view key : keys) {
      std::size_t at = 0;
      while ((at = error_line.find(key, at)) != std::string::npos) {
        at += key.size();
        std::size_t end = at;
        while (end < error_line.size() &&
               std::isdigit(static_cast<unsigned char>(error_line[end]))) {
          ++end;
        }
        if (end > at && end - at < 9) return std::stoi(error_line.substr(at, end - at));
      }
    }
    return -1;
  };
  // The rank that is gone, where the line names one, before the rank that reported it: a barrier's
  // "missing rank(s): 1", mpirun's "process rank 1 ... exited on signal 9", a wait for a peer
  // ("rank 0: recv from rank 1 ... did not complete before its deadline"; the MPI transport says
  // "process 0: recv from process 1").
  const int gone = number_after({"missing rank(s): ", "process rank ", "from rank ", "to rank ",
                                 "from process ", "to process "});
  if (gone >= 0) return gone;
  return number_after({"process ", "rank "});
}

namespace {

// The folder of the run's memory tier when its resolved.toml turns one on (the folder is a
// setting of the run).
std::optional<std::string> memory_folder_of(const std::string& run_dir) {
  const fs::path resolved = fs::path(run_dir) / "resolved.toml";
  std::error_code ec;
  if (!fs::exists(resolved, ec)) return std::nullopt;
  try {
    const Config config = load_config(resolved.string());
    if (config.train.memory_checkpoint_every_steps > 0) {
      return config.train.memory_checkpoint_folder;
    }
  } catch (const Error&) {
    // The restart reads resolved.toml itself and says what is wrong with it.
  }
  return std::nullopt;
}

// Calls dismiss(process) however the scope ends (a standby, a fork server).
template <typename Process>
struct DismissOnExit {
  Process& process;
  ~DismissOnExit() { dismiss(process); }
};

}  // namespace

std::string memory_checkpoint_note(const std::string& run_dir) {
  const auto folder = memory_folder_of(run_dir);
  if (!folder) return "";
  const MemoryCheckpoint memory(run_dir, *folder);
  std::error_code ec;
  const auto bytes = fs::file_size(memory.path(), ec);
  if (ec || !memory.holds_any()) return "";
  return fmt::format(
      "the run's memory checkpoint stays in {} ({:.1f} MB of shared memory): `dtrain train "
      "--resume {}` continues from it; `rm {}` frees the memory",
      memory.path(), static_cast<double>(bytes) / 1e6, run_dir, memory.path());
}

namespace {

// A run that ends for good keeps its memory tier (a --resume can still use it); one line says
// where it is and how to free the memory it holds (tmpfs counts as shared memory until removed).
void note_memory_checkpoint(const std::string& run_dir) {
  try {
    const std::string note = memory_checkpoint_note(run_dir);
    if (!note.empty()) log::warn("supervisor: {}", note);
  } catch (const std::exception&) {
    // A note, not worth failing the exit status the run earned over.
  }
}

}  // namespace

int supervise(const SupervisorOptions& options) {
  // One process waits for the next restart, not two (the command line refuses it too).
  if (options.warm_standby && options.fork_server) {
    throw ConfigError(
        "supervisor: a warm standby and a fork server cannot be combined; choose one "
        "(docs/FAULTS.md)");
  }
  install_stop_handlers();
  // A write to a standby that died since it was last looked at must fail with EPIPE, not end
  // the supervisor.
  std::signal(SIGPIPE, SIG_IGN);
  std::error_code ec;
  fs::create_directories(options.run_dir, ec);
  const std::string error_file = (fs::path(options.run_dir) / ".child-errors").string();
  const std::string log_path = (fs::path(options.run_dir) / "restarts.jsonl").string();
  std::vector<std::string> command = options.first_command;
  int grows = 0;  // restarts that grew the job back, not counted against max_restarts
  // The back-off doubles over failures in a row that made no progress (no newer checkpoint);
  // an attempt that checkpointed further starts it over.
  int stalled = 0;
  std::int64_t best_step = -1;
  // The warm standby and the fork server, each dismissed on every way out of supervision.
  Standby standby;
  const DismissOnExit<Standby> standby_dismisser{standby};
  bool standby_failed = false;              // a standby that ended by itself is not started again
  pid_t activated = -1;                     // the standby that took over from the last attempt
  std::string attempt_errors = error_file;  // the running child's DTRAIN_ERROR_FILE
  int standbys_started = 0;
  ForkServer server;
  const DismissOnExit<ForkServer> server_dismisser{server};
  bool server_failed = false;  // a template that ended by itself is not started again
  // A death ends the wait at once (wait_child); SA_RESTART keeps other calls going.
  make_child_signal_pipe();  // before the handler can run
  struct sigaction on_child {};
  on_child.sa_handler = on_child_signal;
  on_child.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigemptyset(&on_child.sa_mask);
  sigaction(SIGCHLD, &on_child, nullptr);
  // The fork server's workers are forked by the template's child, which exits at once: this
  // process adopts them (a child subreaper), so that it waits for them as for any child.
  if (options.fork_server) prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  const fs::path resolved = fs::path(options.run_dir) / "resolved.toml";
  // Under a launcher (mpirun): its stderr, in <run>/mpirun.stderr, copied to this one's.
  std::optional<LauncherStderr> launcher_stderr;
  if (options.child_is_launcher) {
    launcher_stderr.emplace((fs::path(options.run_dir) / "mpirun.stderr").string());
  }
  for (int restart = 0;; ++restart) {
    const int launch = restart + grows;  // restarts so far, of either kind
    const std::optional<FileIdentity> summary_before =
        file_identity((fs::path(options.run_dir) / "summary.json").string());
    Stopwatch attempt;
    // A woken standby writes its errors where it was told to, its own file.
    if (activated < 0) {
      attempt_errors = error_file;
      fs::remove(attempt_errors, ec);
    }
    const int child_stderr = launcher_stderr
                                 ? launcher_stderr->begin_attempt(fmt::format(
                                       "=== dtrain supervisor, {}: attempt {}: {}\n", now_iso8601(),
                                       launch + 1, fmt::join(command, " ")))
                                 : -1;
    const pid_t pid =
        activated >= 0 ? activated : start_child(command, attempt_errors, {}, {}, child_stderr);
    if (launcher_stderr) launcher_stderr->started();
    activated = -1;
    int forwarded = 0;
    bool growing = false;
    std::function<bool()> grow;
    if (options.can_grow) {
      grow = [&] { return attempt.seconds() >= options.grow_after_seconds && options.can_grow(); };
    }
    std::function<void()> upkeep;
    if (options.warm_standby) {
      upkeep = [&] {
        if (standby.pid >= 0) {
          int status = 0;
          if (waitpid(standby.pid, &status, WNOHANG) == standby.pid) {
            close(standby.fd);
            fs::remove(standby.error_file, ec);
            standby = Standby{};
            standby_failed = true;
            log::warn(
                "supervisor: the warm standby ended with {} before it was needed; restarts start "
                "a new process (see the error above)",
                describe_wait_status(status));
          }
          return;
        }
        if (standby_failed || attempt.seconds() < options.warm_standby_after_seconds ||
            !fs::exists(resolved, ec)) {
          return;
        }
        try {
          const std::string own = fmt::format("{}.standby-{}", error_file, ++standbys_started);
          fs::remove(own, ec);
          standby = start_standby(options.restart_command(launch + 1, -1), own);
        } catch (const Error& e) {
          standby_failed = true;
          log::warn("supervisor: no warm standby: {}", e.what());
        }
      };
    }
    if (options.fork_server) {
      upkeep = [&] {
        if (server.pid > 0) {
          int status = 0;
          if (waitpid(server.pid, &status, WNOHANG) == server.pid) {
            server.pid = -1;  // reaped
            dismiss(server);
            server_failed = true;
            log::warn(
                "supervisor: the fork server ended with {} before it was needed; restarts start "
                "a new process (see the message above)",
                describe_wait_status(status));
            return;
          }
          std::int64_t ready = 0;
          while (read(server.ready_fd, &ready, sizeof(ready)) ==
                 static_cast<ssize_t>(sizeof(ready))) {
            // A second worker (a request asked again, then both answered): one waits, not two.
            if (server.ready > 0 && server.ready != static_cast<pid_t>(ready)) {
              kill(server.ready, SIGKILL);
              while (waitpid(server.ready, &status, 0) < 0 && errno == EINTR) {
              }
            }
            server.ready = static_cast<pid_t>(ready);
            server.asked = false;
          }
          if (server.asked && server.since_asked.seconds() >= kAskAgainSeconds) {
            log::warn("supervisor: the fork server sent no worker in {:.0f} s; asking again",
                      kAskAgainSeconds);
            server.asked = false;
          }
          // As a child subreaper this process adopts every orphan below it (a worker's middle
          // process when the template died in a fork, a lost worker): reaped here, not left as
          // zombies. Only children it does not wait for by pid.
          siginfo_t orphan{};
          while (waitid(P_ALL, 0, &orphan, WEXITED | WNOHANG | WNOWAIT) == 0 && orphan.si_pid > 0 &&
                 orphan.si_pid != pid && orphan.si_pid != server.pid &&
                 orphan.si_pid != server.ready && orphan.si_pid != standby.pid) {
            waitpid(orphan.si_pid, &status, WNOHANG);
            orphan = siginfo_t{};
          }
          // A waiting worker that ended (killed from outside): reaped, and another asked for.
          if (server.ready > 0 && waitpid(server.ready, &status, WNOHANG) == server.ready) {
            log::warn("supervisor: the fork server's waiting worker ended with {}; forking another",
                      describe_wait_status(status));
            server.ready = -1;
          }
          if (server.ready < 0 && !server.asked &&
              attempt.seconds() >= options.warm_standby_after_seconds) {
            const char request = 'f';
            server.asked = write(server.command_fd, &request, 1) == 1;
            server.since_asked.reset();
          }
          return;
        }
        if (server_failed || attempt.seconds() < options.warm_standby_after_seconds ||
            !fs::exists(resolved, ec)) {
          return;
        }
        try {
          const std::string own = fmt::format("{}.fork-server", error_file);
          fs::remove(own, ec);
          server = start_fork_server(options.restart_command(launch + 1, -1), own);
        } catch (const Error& e) {
          server_failed = true;
          log::warn("supervisor: no fork server: {}", e.what());
        }
      };
    }
    // No standby or fork server with a launcher: the upkeep is passing its stderr on.
    if (launcher_stderr) upkeep = [&] { launcher_stderr->pump(); };
    StoppedKill stopped;
    const int status =
        wait_child(pid, forwarded, grow, growing, upkeep, options.stopped_limit_seconds,
                   options.stopped_limit_name, stopped);
    // What mpirun wrote before it ended is in the file now: copied to its end (what a process it
    // left behind writes later is copied before the next attempt, and stays in the file).
    if (launcher_stderr) launcher_stderr->pump();
    const std::string launcher_death = launcher_stderr ? launcher_stderr->death() : "";
    timeline_mark(fmt::format("supervisor saw the end of pid {}", pid));
    const double ran = attempt.seconds();
    // A run that wrote its summary.json during this attempt had finished: a process that died
    // after that (an mpirun job torn down at its end, a grow stop that came too late) costs
    // nothing, and a restart would find nothing left to train.
    const fs::path summary = fs::path(options.run_dir) / "summary.json";
    if (status != 0 && written_since(summary.string(), summary_before)) {
      log::warn("supervisor: the run ended with {} after it completed ({} is written): done",
                describe_wait_status(status), summary.string());
      return 0;
    }
    const bool stopped_for_grow =
        (WIFEXITED(status) && WEXITSTATUS(status) == 128 + SIGTERM) ||
        (WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) ||
        (options.child_is_launcher && !(WIFEXITED(status) && WEXITSTATUS(status) == 0));
    if (growing && stopped_for_grow) {
      // Stopped by us to take a worker back (dtrain exits 143; mpirun, which passed the signal
      // on, exits with its own status): not a failure, not counted. Another ending in the same
      // window is handled as any other below.
      command = options.restart_command(launch + 1, kGrowRestart);
      const nlohmann::json record = {{"restart", launch + 1},
                                     {"at", now_iso8601()},
                                     {"attempt_seconds", ran},
                                     {"ended", "stopped by the supervisor (SIGTERM)"},
                                     {"cause", "grow: the job runs on fewer workers than it may"},
                                     {"rank", nullptr},
                                     {"backoff_seconds", 0.0},
                                     {"command", command}};
      std::ofstream(log_path, std::ios::app) << record.dump() << "\n";
      log::warn("supervisor: growing the job back: restarting it from its checkpoint ({})",
                log_path);
      ++grows;
      --restart;  // a grow does not spend a restart
      continue;
    }
    if (forwarded != 0) {
      // A stop the supervisor passed on: it exits as killed by that signal (143, 130, 129), also
      // when mpirun, which passed it on in turn, ends with a status of its own (1), or when the
      // child was stopped and had to be killed.
      if (status != 0 && (options.child_is_launcher || stopped.killed)) return 128 + forwarded;
      return exit_code_of(status);
    }
    if (!restartable(status)) {
      if (status != 0) note_memory_checkpoint(options.run_dir);
      return exit_code_of(status);
    }
    const std::string cause_line = last_error_line(attempt_errors);
    if (attempt_errors != error_file) fs::remove(attempt_errors, ec);  // a woken standby's
    const std::string how = describe_wait_status(status);
    // The cause and the rank it names. A frozen process printed nothing: the supervisor's own
    // kill is the cause. A process of an mpirun job that a signal ended printed nothing either
    // (the others' errors, if any, name themselves): mpirun's line names it.
    std::string cause;  // for the warning (without "error: ")
    std::string cause_record;
    int failed_rank = -1;
    if (stopped.killed) {
      cause = cause_record = stopped.cause;
    } else if (!launcher_death.empty()) {
      cause = cause_record = launcher_death;
      failed_rank = rank_named_in(launcher_death);
    } else if (!cause_line.empty()) {
      cause = cause_line.substr(7);
      cause_record = cause_line;
      failed_rank = rank_named_in(cause_line);
    } else {
      cause_record = how;
    }
    if (restart >= options.max_restarts) {
      log::warn("supervisor: the run ended with {}{} and all {} restarts are spent; giving up ({})",
                how, cause.empty() ? "" : ": " + cause, options.max_restarts, log_path);
      note_memory_checkpoint(options.run_dir);
      return exit_code_of(status);
    }
    nlohmann::json record = {{"restart", launch + 1},
                             {"at", now_iso8601()},
                             {"attempt_seconds", ran},
                             {"ended", how},
                             {"cause", cause_record},
                             {"rank", failed_rank >= 0 ? nlohmann::json(failed_rank) : nullptr}};
    const std::int64_t logged =
        last_logged_step((fs::path(options.run_dir) / "metrics.jsonl").string());
    record["last_logged_step"] = logged;
    try {
      CheckpointDir dir((fs::path(options.run_dir) / "checkpoints").string(), 0);
      std::optional<MemoryCheckpoint> memory;
      if (const auto folder = memory_folder_of(options.run_dir)) {
        memory.emplace(options.run_dir, *folder);
      }
      const MemoryCheckpoint* const tier = memory ? &*memory : nullptr;
      if (has_any_checkpoint(dir, tier)) {
        // Verified as a resume verifies it, but its floats are not copied: the supervisor
        // needs its name and step, not a copy of the model before every restart.
        const VerifiedCheckpoint good = newest_checkpoint(dir, tier, Keep::kNoFloats);
        record["checkpoint"] = good.path;
        record["checkpoint_step"] = good.checkpoint.global_step;
        record["steps_lost_at_least"] =
            std::max<std::int64_t>(0, logged - good.checkpoint.global_step);
      } else {
        record["checkpoint"] = nullptr;
        record["steps_lost_at_least"] = std::max<std::int64_t>(0, logged);
      }
    } catch (const CheckpointError& e) {
      record["checkpoint"] = nullptr;
      record["checkpoint_error"] = e.what();
    }
    const std::int64_t step =
        record.contains("checkpoint_step") ? record["checkpoint_step"].get<std::int64_t>() : -1;
    stalled = step > best_step || restart == 0 ? 0 : stalled + 1;
    best_step = std::max(best_step, step);
    const double backoff =
        std::min(kMaxBackoffSeconds, options.backoff_seconds * (1 << std::min(stalled, 10)));
    record["backoff_seconds"] = backoff;
    command = options.restart_command(launch + 1, failed_rank);
    record["command"] = command;
    const bool warm = standby.pid >= 0 && standby.command == command;
    record["warm_standby"] = warm;
    const bool forked = server.ready > 0 && server.command == command;
    record["fork_server"] = forked;
    {
      std::ofstream out(log_path, std::ios::app);
      out << record.dump() << "\n";
      if (!out) log::warn("supervisor: cannot append to {}; restarting anyway", log_path);
    }
    log::warn(
        "supervisor: the run ended with {}{}; restart {} of {} in {:.1f} s from {}{} (logged in "
        "{})",
        how, cause.empty() ? "" : ": " + cause, restart + 1, options.max_restarts, backoff,
        record["checkpoint"].is_string() ? record["checkpoint"].get<std::string>()
                                         : std::string("the beginning"),
        warm     ? " by the warm standby"
        : forked ? " by a worker of the fork server"
                 : "",
        log_path);
    Stopwatch waited;
    while (waited.seconds() < backoff) {
      if (stop_requested() != 0) return 128 + stop_requested();
      std::this_thread::sleep_for(kPoll);
    }
    if (forked) {
      // SIGUSR1 wakes it; it then reads the newest checkpoint there is now. One that ended during
      // the back-off is reaped here and a new process starts instead.
      int ended = 0;
      const pid_t worker = server.ready;
      server.ready = -1;
      server.asked = false;
      const bool alive = waitpid(worker, &ended, WNOHANG) == 0;
      fs::remove(server.error_file, ec);
      if (alive && kill(worker, SIGUSR1) == 0) {
        activated = worker;
        attempt_errors = server.error_file;
        fs::remove(error_file, ec);
        timeline_mark(fmt::format("supervisor woke the forked worker {}", worker));
      } else {
        log::warn(
            "supervisor: the fork server's worker could not be woken ({}); starting a new "
            "process",
            alive ? std::strerror(errno) : describe_wait_status(ended));
        if (alive) {
          kill(worker, SIGKILL);
          reap(worker);
        }
      }
    } else if (warm) {
      // One byte wakes it; it then reads the newest checkpoint there is now. One that ended
      // during the back-off is reaped here and a new process starts instead.
      const char go = 'g';
      int ended = 0;
      const bool alive = waitpid(standby.pid, &ended, WNOHANG) == 0;
      const bool woken = alive && write(standby.fd, &go, 1) == 1;
      if (woken) {
        close(standby.fd);
        activated = standby.pid;
        attempt_errors = standby.error_file;
        fs::remove(error_file, ec);
        standby = Standby{};
      } else {
        log::warn("supervisor: the warm standby could not be woken ({}); starting a new process",
                  alive ? std::strerror(errno) : describe_wait_status(ended));
        if (alive) {
          dismiss(standby);
        } else {
          close(standby.fd);
          standby = Standby{};
        }
      }
    } else {
      dismiss(standby);  // built for another command (or none was ready)
    }
  }
}

}  // namespace dtrain::train
