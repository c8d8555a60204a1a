#include "dtrain/train/supervisor.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/timer.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/config.h"
#include "dtrain/train/memory_checkpoint.h"

extern char** environ;

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

constexpr double kMaxBackoffSeconds = 30.0;
// How often the supervisor looks at its child: a death is seen within this (about 0.1% of a
// core's time spent looking).
constexpr auto kPoll = std::chrono::milliseconds(10);

// Starts `argv` with the supervisor's environment plus DTRAIN_ERROR_FILE; returns its pid.
pid_t start_child(const std::vector<std::string>& argv, const std::string& error_file) {
  std::vector<char*> args;
  for (const std::string& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
  args.push_back(nullptr);
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, "DTRAIN_ERROR_FILE=", 18) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("DTRAIN_ERROR_FILE=" + error_file);
  std::vector<char*> env;
  for (std::string& e : env_strings) env.push_back(e.data());
  env.push_back(nullptr);
  // The child gets a process group of its own: a Ctrl-C at the terminal or a scheduler's signal
  // to the supervisor's group reaches the supervisor alone, which passes it on once. Delivered to
  // both, the child would see the signal twice, and its second (the default action) would end it
  // before the checkpoint its first asked for.
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], nullptr, &attributes, args.data(), env.data());
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    throw Error(fmt::format("cannot start {}: {}", argv[0], std::strerror(rc)));
  }
  return pid;
}

// Waits for `pid`, passing on the first SIGTERM / SIGINT the supervisor receives; returns the
// wait status and sets `forwarded` to the signal passed on (0: none). `grow`: when it returns
// true, the child is asked to stop (SIGTERM) once, and `growing` is set.
int wait_child(pid_t pid, int& forwarded, const std::function<bool()>& grow, bool& growing) {
  forwarded = 0;
  growing = false;
  for (;;) {
    if (!growing && forwarded == 0 && grow && grow()) {
      growing = true;
      kill(pid, SIGTERM);
    }
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) return status;
    if (done < 0 && errno != EINTR) {
      throw InternalError(fmt::format("waitpid({}) failed: {}", pid, std::strerror(errno)));
    }
    if (forwarded == 0 && stop_requested() != 0) {
      forwarded = stop_requested();
      kill(pid, forwarded);
    }
    std::this_thread::sleep_for(kPoll);
  }
}

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

// The largest "step" of metrics.jsonl's records, or -1.
std::int64_t last_logged_step(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::int64_t last = -1;
  while (std::getline(in, line)) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!record.is_discarded() && record.contains("step") && record["step"].is_number_integer()) {
      last = std::max(last, record["step"].get<std::int64_t>());
    }
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
    // A stop the child was asked for ends supervision; any other signal is a death to mend.
    return WTERMSIG(status) != SIGTERM && WTERMSIG(status) != SIGINT;
  }
  if (!WIFEXITED(status)) return false;
  const int code = WEXITSTATUS(status);
  return !(code == 0 || code == 1 || code == 2 || code == 128 + SIGTERM || code == 128 + SIGINT);
}

int rank_named_in(const std::string& error_line) {
  for (const std::string_view key : {"process ", "rank "}) {
    std::size_t at = 0;
    while ((at = error_line.find(key, at)) != std::string::npos) {
      at += key.size();
      std::size_t end = at;
      while (end < error_line.size() && std::isdigit(static_cast<unsigned char>(error_line[end]))) {
        ++end;
      }
      if (end > at) return std::stoi(error_line.substr(at, end - at));
    }
  }
  return -1;
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

}  // namespace

int supervise(const SupervisorOptions& options) {
  install_stop_handlers();
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
  for (int restart = 0;; ++restart) {
    const int launch = restart + grows;  // restarts so far, of either kind
    fs::remove(error_file, ec);
    const auto attempt_start = fs::file_time_type::clock::now();
    Stopwatch attempt;
    const pid_t pid = start_child(command, error_file);
    int forwarded = 0;
    bool growing = false;
    std::function<bool()> grow;
    if (options.can_grow) {
      grow = [&] { return attempt.seconds() >= options.grow_after_seconds && options.can_grow(); };
    }
    const int status = wait_child(pid, forwarded, grow, growing);
    const double ran = attempt.seconds();
    // A run that wrote its summary.json during this attempt had finished: a process that died
    // after that (an mpirun job torn down at its end, a grow stop that came too late) costs
    // nothing, and a restart would find nothing left to train.
    const fs::path summary = fs::path(options.run_dir) / "summary.json";
    if (status != 0 && fs::exists(summary, ec) &&
        fs::last_write_time(summary, ec) >= attempt_start) {
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
    if (forwarded != 0 || !restartable(status)) return exit_code_of(status);
    const std::string cause_line = last_error_line(error_file);
    const std::string how = describe_wait_status(status);
    if (restart >= options.max_restarts) {
      log::warn("supervisor: the run ended with {} and all {} restarts are spent; giving up ({})",
                how, options.max_restarts, log_path);
      return exit_code_of(status);
    }
    const int failed_rank = rank_named_in(cause_line);
    nlohmann::json record = {{"restart", launch + 1},
                             {"at", now_iso8601()},
                             {"attempt_seconds", ran},
                             {"ended", how},
                             {"cause", cause_line.empty() ? how : cause_line},
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
        const VerifiedCheckpoint good = newest_checkpoint(dir, tier);
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
    {
      std::ofstream out(log_path, std::ios::app);
      out << record.dump() << "\n";
      if (!out) log::warn("supervisor: cannot append to {}; restarting anyway", log_path);
    }
    log::warn(
        "supervisor: the run ended with {}{}; restart {} of {} in {:.1f} s from {} (logged in {})",
        how, cause_line.empty() ? "" : ": " + cause_line.substr(7), restart + 1,
        options.max_restarts, backoff,
        record["checkpoint"].is_string() ? record["checkpoint"].get<std::string>()
                                         : std::string("the beginning"),
        log_path);
    Stopwatch waited;
    while (waited.seconds() < backoff) {
      if (stop_requested() != 0) return 128 + stop_requested();
      std::this_thread::sleep_for(kPoll);
    }
  }
}

}  // namespace dtrain::train
