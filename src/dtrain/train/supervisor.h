// Restarts a training run without a person: runs `dtrain train` as a child process (itself, or
// `mpirun ... dtrain train` for a job of processes), and when the child dies or fails in a way a
// restart can mend, starts it again from the newest checkpoint that verifies, up to max_restarts
// times, with an exponential back-off. torchrun's elastic agent does the same for PyTorch: it
// restarts every worker of the job, as this does (one process, or the whole mpirun job).
//
//   child ends with                                   supervisor
//   status 0                                          done: exits 0
//   status 1 or 2 (bad command line, bad input)       exits with it: a restart would fail alike
//   128 + SIGTERM / SIGINT / SIGHUP (an asked stop)    exits with it: the stop was wanted
//   a signal (kill -9, OOM killer), status 3 or 4     restarts (internal error; a rank failed or
//     (a rank failed / a deadline fired), any other     a deadline fired) after the back-off
//     status (mpirun's own); stopped (SIGSTOP) past     (the supervisor kills a stopped child
//     stopped_limit_seconds                              first)
//
// Elastic membership (--min-workers, --max-workers): a restart after a failure may run on fewer
// workers (the checkpoint is resharded), and a later one grows back (see can_grow).
//
// Each restart is a line of <run_dir>/restarts.jsonl: when, the cause (the child's last `error:`
// line, written to DTRAIN_ERROR_FILE by the dtrain main, or the signal), the rank the cause names,
// the checkpoint resumed from and its step, the last step metrics.jsonl logged, the steps lost (at
// least: steps between log records are not counted), the back-off. A SIGTERM, SIGINT or SIGHUP
// sent to the supervisor is passed to the child (which checkpoints and stops) and ends supervision
// with 128 + the signal. A run that fails for good says where its memory checkpoint stays.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dtrain::train {

// restart_command's `failed_rank` for a restart that grows the job back (elastic membership).
inline constexpr int kGrowRestart = -2;

struct SupervisorOptions {
  std::vector<std::string> first_command;  // argv of the first attempt
  // argv of restart k (1, 2, ...), given the rank its cause named (-1: none; kGrowRestart: the
  // supervisor stopped the child to grow the job): the command resumes the run; it may shrink
  // or grow the job (elastic membership).
  std::function<std::vector<std::string>(int restart, int failed_rank)> restart_command;
  // Elastic membership: while can_grow() says the job runs on fewer workers than it may, the
  // supervisor stops the child after grow_after_seconds of training (SIGTERM: it checkpoints
  // and exits 143) and restarts it with restart_command(k, kGrowRestart). Such restarts are
  // logged but do not count against max_restarts. Null: never.
  std::function<bool()> can_grow;
  double grow_after_seconds = 30.0;
  // The child is a launcher (mpirun) that ends with a status of its own when the signal it passed
  // on stopped dtrain: any non-zero status then ends a grow stop, not only dtrain's 143.
  bool child_is_launcher = false;
  // Warm standby (standby.h): once the run folder holds resolved.toml and the running child has
  // run warm_standby_after_seconds, keep one process of restart_command(k, -1) started and
  // waiting; a restart whose command is the standby's activates it (one byte on a pipe) instead of
  // starting a process. Not with elastic membership or a launcher (restart_command must not
  // depend on the failure). Restarts it served are logged with "warm_standby": true.
  bool warm_standby = false;
  // Fork server (fork_server.h): once the run folder holds resolved.toml and the running child has
  // run warm_standby_after_seconds, start one template process of restart_command(k, -1) and keep
  // one worker forked from it and waiting; a restart whose command is the template's wakes that
  // worker (SIGUSR1) instead of starting a process. Not with warm_standby, elastic membership or
  // a launcher. Restarts it served are logged with "fork_server": true.
  bool fork_server = false;
  double warm_standby_after_seconds = 1.0;
  std::string run_dir;  // holds restarts.jsonl, metrics.jsonl and checkpoints/
  int max_restarts = 0;
  // Before a restart: backoff_seconds x 2^k, at most 30 s, where k counts the failures in a row
  // without a newer checkpoint (k = 0 for the first failure and after an attempt that
  // checkpointed further).
  double backoff_seconds = 1.0;
  // A child that stays stopped (SIGSTOP, SIGTSTP) this long is killed (SIGKILL) and restarted like
  // any death, the cause naming the stop: its ranks are threads of that one process, so none of
  // their deadlines can fire while it is stopped. The run's deadline
  // (parallel.comm_timeout_seconds) is the natural value. 0: never (with a launcher: a stopped
  // process of an mpirun job is caught by the other processes' deadlines).
  double stopped_limit_seconds = 0.0;
  // What set it, for the messages: "parallel.comm_timeout_seconds = 3".
  std::string stopped_limit_name;
};

// Runs the child until it succeeds, fails for good or max_restarts are spent; returns the exit
// status for the supervisor to exit with.
int supervise(const SupervisorOptions& options);

// The current UTC time as 2026-11-26T17:36:15Z (restarts.jsonl's "at").
std::string now_iso8601();

// How a child ended, as waitpid's status says it: "exit status 4", "killed by signal 9 (SIGKILL)".
std::string describe_wait_status(int status);

// Whether a child that ended with wait status `status` is restarted (the table above).
bool restartable(int status);

// The "step" of the last record of metrics.jsonl at `path` that has one (the step the attempt that
// just ended logged last), or -1 (no such record, no file). Reads the file from its end.
std::int64_t last_logged_step(const std::string& path);

// For a run in `run_dir` that ended for good: "the run's memory checkpoint stays in <file> (<size>
// MB of shared memory): `dtrain train --resume <run_dir>` continues from it; `rm <file>` frees the
// memory", or "" when its resolved.toml turns no memory tier on or the file holds nothing.
std::string memory_checkpoint_note(const std::string& run_dir);

// The rank an error line names, or -1: the rank it names as missing or dead ("missing rank(s): 1",
// mpirun's "process rank 1 ... exited on signal 9", "send to rank 1 ... did not complete before
// its deadline") before the rank that reports ("rank 1: ...", "error: process 1 of 2: ...").
int rank_named_in(const std::string& error_line);

}  // namespace dtrain::train
