#include "dtrain/train/grow_probe.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "dtrain/base/env.h"

namespace dtrain::train {

namespace {

std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exit status {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {}", WTERMSIG(status));
  return fmt::format("wait status {}", status);
}

}  // namespace

GrowAnswer ask_grow_probe(const std::vector<std::string>& argv, long long grow_to,
                          const std::string& log_path, std::chrono::milliseconds deadline) {
  GrowAnswer answer;
  if (argv.empty()) {
    answer.why = "no command";
    return answer;
  }
  std::vector<char*> args = env::c_strings(argv);
  std::vector<std::string> env_strings = env::environment_without({"DTRAIN_GROW_TO"});
  env_strings.push_back(fmt::format("DTRAIN_GROW_TO={}", grow_to));
  std::vector<char*> env = env::c_strings(env_strings);

  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attributes, 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, log_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attributes, args.data(), env.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    answer.why = fmt::format("cannot start {}: {}", argv[0], std::strerror(rc));
    return answer;
  }
  const auto until = std::chrono::steady_clock::now() + deadline;
  for (;;) {
    int status = 0;
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      answer.available = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      answer.why = describe_status(status);
      return answer;
    }
    if (done < 0 && errno != EINTR) {
      answer.why = fmt::format("waitpid failed: {}", std::strerror(errno));
      return answer;
    }
    if (std::chrono::steady_clock::now() >= until) {
      kill(-pid, SIGKILL);
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      answer.why =
          fmt::format("timed out after {:.3g} s", std::chrono::duration<double>(deadline).count());
      return answer;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace dtrain::train
