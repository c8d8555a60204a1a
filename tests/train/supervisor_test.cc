// The supervisor of `dtrain train --max-restarts` (supervisor.h) with shell children: which
// endings it restarts, what restarts.jsonl records, and the elastic grow restart.
#include "dtrain/train/supervisor.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "dtrain/base/timer.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;

// A wait status as waitpid reports it.
int exited(int code) { return code << 8; }
int killed(int signal) { return signal; }

TEST(Supervisor, RestartsDeathsAndFailedRanksButNotBadInputOrAskedStops) {
  EXPECT_TRUE(restartable(killed(SIGKILL)));
  EXPECT_TRUE(restartable(killed(SIGSEGV)));
  EXPECT_TRUE(restartable(exited(3)));    // internal error
  EXPECT_TRUE(restartable(exited(4)));    // a rank failed, a deadline passed
  EXPECT_TRUE(restartable(exited(137)));  // mpirun: one of its processes was killed
  EXPECT_FALSE(restartable(exited(0)));
  EXPECT_FALSE(restartable(exited(1)));  // bad command line
  EXPECT_FALSE(restartable(exited(2)));  // bad input
  EXPECT_FALSE(restartable(exited(143)));
  EXPECT_FALSE(restartable(exited(130)));
  EXPECT_FALSE(restartable(killed(SIGTERM)));
  EXPECT_FALSE(restartable(exited(129)));  // SIGHUP: the terminal went away, a stop as SIGTERM
  EXPECT_FALSE(restartable(killed(SIGHUP)));
  EXPECT_EQ(describe_wait_status(killed(SIGKILL)), "killed by signal 9 (SIGKILL)");
  EXPECT_EQ(describe_wait_status(exited(4)), "exit status 4");
}

TEST(Supervisor, FindsTheRankAnErrorNames) {
  EXPECT_EQ(rank_named_in("error: rank 2: injected fault after step 40"), 2);
  EXPECT_EQ(rank_named_in("error: process 1 of 2: something"), 1);
  // The rank that is gone, not the rank that reported it.
  EXPECT_EQ(rank_named_in("error: rank 0: barrier (tag 0x7, 0 bytes): missing rank(s): 1 (rank 0 "
                          "waited 2250 ms for the arguments of every rank)"),
            1);
  EXPECT_EQ(rank_named_in("error: process 0 of 2: rank 0: send to rank 1 (tag 0x12, 538644 bytes) "
                          "did not complete before its deadline"),
            1);
  EXPECT_EQ(rank_named_in("error: process 1 of 2: rank 1: recv from rank 0 (tag 0x3, 8 bytes) "
                          "did not complete before its deadline"),
            0);
  EXPECT_EQ(rank_named_in("error: process 0 of 2: process 0: send to process 1 (tag 0x12, 538644 "
                          "bytes) did not complete before its deadline"),
            1);
  EXPECT_EQ(rank_named_in("mpirun noticed that process rank 1 with PID 0 on node vm exited on "
                          "signal 9 (Killed)."),
            1);
  EXPECT_EQ(rank_named_in("error: ps server 0: bsp step 0 waited 0.8 s for the gradients of "
                          "worker(s) 1 (rank 1)"),
            1);
  EXPECT_EQ(rank_named_in("error: no rank here"), -1);
  EXPECT_EQ(rank_named_in(""), -1);
}

// steps_lost_at_least in restarts.jsonl: the step the attempt that died logged last, read from the
// end of metrics.jsonl (not the largest step of the file: an earlier attempt may have got further).
TEST(Supervisor, ReadsTheLastLoggedStepFromTheEndOfMetrics) {
  const fs::path path =
      fs::temp_directory_path() / fmt::format("dtrain_last_logged_step_{}.jsonl", getpid());
  EXPECT_EQ(last_logged_step(path.string()), -1);  // no file
  {
    std::ofstream out(path);
    out << R"({"step":1,"loss":2.5})"
        << "\n"
        << R"({"step":90,"loss":2.0})"
        << "\n";
    out << R"({"step":60,"loss":2.1})"
        << "\n";  // a restart from step 59's checkpoint
    out << R"({"epoch":1,"test_loss":2.2})"
        << "\n";
    out << R"({"step":61,"lo)";  // cut by the kill
  }
  EXPECT_EQ(last_logged_step(path.string()), 60);
  {
    // The last step record lies 200 KB before the end (more than one window of the tail).
    std::ofstream out(path);
    out << R"({"step":7})"
        << "\n";
    for (int i = 0; i < 4000; ++i)
      out << R"({"event":"a line without a step, fifty bytes long"})"
          << "\n";
  }
  EXPECT_EQ(last_logged_step(path.string()), 7);
  std::ofstream(path) << R"({"event":"start"})"
                      << "\n";
  EXPECT_EQ(last_logged_step(path.string()), -1);
  fs::remove(path);
}

class SupervisorRun : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / fmt::format("dtrain_supervisor_{}_{}", info->name(), getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<nlohmann::json> restarts() const {
    std::vector<nlohmann::json> out;
    std::ifstream in(dir_ / "restarts.jsonl");
    for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
    return out;
  }

  // A shell child running `script` (one that stops itself) first, a child that succeeds at once on
  // every restart (counted in `restarts_asked`), a stop limit of `limit` seconds named `name`.
  SupervisorOptions stopping_child(const std::string& script, double limit, const std::string& name,
                                   int& restarts_asked) const {
    SupervisorOptions options;
    options.first_command = {"/bin/sh", "-c", script};
    options.restart_command = [&restarts_asked](int, int) {
      ++restarts_asked;
      return std::vector<std::string>{"/bin/sh", "-c", "exit 0"};
    };
    options.run_dir = dir_.string();
    options.max_restarts = 1;
    options.backoff_seconds = 0.01;
    options.stopped_limit_seconds = limit;
    options.stopped_limit_name = name;
    return options;
  }

  // A shell child: fails with `code` (after writing `error` to the supervisor's error file) while
  // the count file holds fewer than `failures` lines, then succeeds.
  SupervisorOptions failing_child(int failures, int code, const std::string& error) const {
    const std::string count = (dir_ / "count").string();
    const std::string script = fmt::format(
        "echo x >> {0}; if [ $(wc -l < {0}) -le {1} ]; then echo '{2}' >> \"$DTRAIN_ERROR_FILE\"; "
        "exit {3}; fi; exit 0",
        count, failures, error, code);
    SupervisorOptions options;
    options.first_command = {"/bin/sh", "-c", script};
    options.restart_command = [script](int, int) {
      return std::vector<std::string>{"/bin/sh", "-c", script};
    };
    options.run_dir = dir_.string();
    options.backoff_seconds = 0.01;
    return options;
  }

  fs::path dir_;
};

TEST_F(SupervisorRun, RestartsUntilTheChildSucceedsAndLogsEachCause) {
  SupervisorOptions options = failing_child(2, 4, "error: rank 1: boom");
  options.max_restarts = 3;
  EXPECT_EQ(supervise(options), 0);
  const auto log = restarts();
  ASSERT_EQ(log.size(), 2u);
  for (std::size_t i = 0; i < log.size(); ++i) {
    EXPECT_EQ(log[i]["restart"], i + 1);
    EXPECT_EQ(log[i]["ended"], "exit status 4");
    EXPECT_EQ(log[i]["cause"], "error: rank 1: boom");
    EXPECT_EQ(log[i]["rank"], 1);
    EXPECT_TRUE(log[i]["checkpoint"].is_null());  // the child wrote none
  }
}

TEST_F(SupervisorRun, GivesUpWhenTheRestartsAreSpent) {
  SupervisorOptions options = failing_child(5, 3, "error: internal: bad");
  options.max_restarts = 2;
  EXPECT_EQ(supervise(options), 3);
  EXPECT_EQ(restarts().size(), 2u);
}

TEST_F(SupervisorRun, BadInputIsNotRestarted) {
  SupervisorOptions options = failing_child(1, 2, "error: data directory /x does not exist");
  options.max_restarts = 3;
  EXPECT_EQ(supervise(options), 2);
  EXPECT_TRUE(restarts().empty());
}

TEST_F(SupervisorRun, GrowsTheJobBackByStoppingTheChild) {
  // The first child waits for SIGTERM and exits 143 as dtrain does after its checkpoint; the
  // grow restart's child succeeds at once.
  SupervisorOptions options;
  options.first_command = {"/bin/sh", "-c", "trap 'kill $!; exit 143' TERM; sleep 20 & wait"};
  int grow_restarts = 0;
  options.restart_command = [&](int, int failed_rank) {
    grow_restarts += failed_rank == kGrowRestart ? 1 : 0;
    return std::vector<std::string>{"/bin/sh", "-c", "exit 0"};
  };
  bool small = true;
  options.can_grow = [&] { return small; };
  options.grow_after_seconds = 0.2;
  options.run_dir = dir_.string();
  options.max_restarts = 1;
  EXPECT_EQ(supervise(options), 0);
  EXPECT_EQ(grow_restarts, 1);
  const auto log = restarts();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0]["cause"].get<std::string>(), HasSubstr("grow"));
}

// A child that stops itself (SIGSTOP) stays stopped: the supervisor kills it past
// stopped_limit_seconds, names the stop as the cause, and the restart succeeds.
TEST_F(SupervisorRun, KillsAndRestartsAChildStoppedPastTheLimit) {
  int restarts_asked = 0;
  const SupervisorOptions options = stopping_child(
      "kill -STOP $$; exit 0", 0.2, "parallel.comm_timeout_seconds = 0.2", restarts_asked);
  Stopwatch clock;
  EXPECT_EQ(supervise(options), 0);
  EXPECT_LT(clock.seconds(), 5.0);
  const auto log = restarts();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0]["ended"], "killed by signal 9 (SIGKILL)");
  // The time is the one seen at the kill: 0.2 s, or a little more after a late wake.
  EXPECT_THAT(log[0]["cause"].get<std::string>(),
              ContainsRegex("was stopped \\(SIGSTOP\\) for [0-9]+\\.[0-9] s, past "
                            "parallel\\.comm_timeout_seconds = 0\\.2"));
  EXPECT_TRUE(log[0]["rank"].is_null());
}

// Under a launcher (mpirun) the child's stderr goes to <run>/mpirun.stderr, a header line before
// each attempt; the cause of a restart is the attempt's first line naming a process that a signal
// ended (with several killed, the OOM killer's round, the first is the cause), not the last.
TEST_F(SupervisorRun, ALauncherStderrGoesToAFileAndItsFirstDeathIsTheCause) {
  const std::string count = (dir_ / "count").string();
  const std::string script = fmt::format(
      "echo x >> {0}; if [ $(wc -l < {0}) -le 1 ]; then "
      "echo 'mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 "
      "(Killed).' >&2; "
      "echo 'mpirun noticed that process rank 0 with PID 0 on node vm exited on signal 9 "
      "(Killed).' >&2; exit 137; fi; echo 'second attempt' >&2; exit 0",
      count);
  SupervisorOptions options;
  options.first_command = {"/bin/sh", "-c", script};
  options.restart_command = [script](int, int) {
    return std::vector<std::string>{"/bin/sh", "-c", script};
  };
  options.run_dir = dir_.string();
  options.backoff_seconds = 0.01;
  options.max_restarts = 1;
  options.child_is_launcher = true;
  EXPECT_EQ(supervise(options), 0);
  const auto log = restarts();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_THAT(log[0]["cause"].get<std::string>(), HasSubstr("process rank 1 with PID 0"));
  EXPECT_EQ(log[0]["rank"], 1);
  std::ifstream in(dir_ / "mpirun.stderr");
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_THAT(lines[0], ContainsRegex("^=== dtrain supervisor, .*: attempt 1: /bin/sh -c "));
  EXPECT_THAT(lines[1], HasSubstr("process rank 1"));
  EXPECT_THAT(lines[2], HasSubstr("process rank 0"));
  EXPECT_THAT(lines[3], ContainsRegex("^=== dtrain supervisor, .*: attempt 2: /bin/sh -c "));
  EXPECT_EQ(lines[4], "second attempt");
}

// A job-wide pause (Slurm's suspend; `kill -STOP child; kill -STOP supervisor; ...; kill -CONT
// supervisor child`) is no stop past the limit: the supervisor was stopped too, and the child's
// stop counts from the supervisor's first look after its own. The child here stops itself, a
// helper of its stops the supervisor (this test's process) 0.2 s later for 1.6 s and continues
// both; the child then succeeds. Counted across the pause, its stop (1.8 s) would pass the 1-s
// limit and be killed and restarted.
TEST_F(SupervisorRun, AJobWidePauseDoesNotKillTheStoppedChild) {
  int restarts_asked = 0;
  const SupervisorOptions options = stopping_child(
      "sup=$PPID; me=$$; (kill -STOP $me; sleep 0.2; kill -STOP $sup; sleep 1.6; "
      "kill -CONT $sup $me) & wait; exit 0",
      1.0, "parallel.comm_timeout_seconds = 1", restarts_asked);
  EXPECT_EQ(supervise(options), 0);
  EXPECT_EQ(restarts_asked, 0);
  EXPECT_TRUE(restarts().empty());
}

}  // namespace
}  // namespace dtrain::train
