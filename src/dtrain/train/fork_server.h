// Restarts by fork (docs/FAULTS.md, "Restarts by fork: --fork-server"): a template process that
// the supervisor starts once per job, and that forks each restart's worker ahead of the failure.
//
// The template is `dtrain train --resume <run>` started with DTRAIN_FORK_SERVER set. It loads the
// data, builds the model and optimizer and runs one warm-up forward and backward (as a warm
// standby does, standby.h) with its tensors in the shared scratch arena (base/shared_scratch.h);
// then, single-threaded, it waits for the supervisor on a pipe, using no CPU. Each byte 'f' the
// supervisor writes makes it fork a worker (twice: the middle process exits at once, so that the
// worker is the supervisor's child: the supervisor is a child subreaper). The worker maps the
// arena's pages (shared_scratch::populate), says it is ready (its pid on the ready pipe) and
// sleeps until SIGUSR1; then it goes on from where the template forked: it reads the newest
// checkpoint of either tier as it is at that moment and trains. A restart costs a signal, a
// checkpoint read and a first step on warm pages, instead of exec, dynamic linking, the data, the
// model and a first step on fresh pages; the template stays as it was after its warm-up, so the
// job pays for it once, not once per restart (a warm standby must be rebuilt after each).
//
// DTRAIN_FORK_SERVER = "<command fd>,<ready fd>,<supervisor pid>". While it waits, the template and
// its forked workers are named "dtrain-template" (pgrep -x dtrain finds only the running child);
// if the supervisor goes away, the template sees EOF on its pipe and a waiting worker gets
// SIGKILL (PR_SET_PDEATHSIG, cleared when it is woken, so that a training worker outlives its
// supervisor as an exec-ed child does); SIGTERM / SIGINT end either silently.
//
// Served: runs whose ranks are each a Trainer: one worker on the main thread (Trainer::run), or
// ranks that are threads of this process (run_training, launch.cc: the template runs the ranks
// once for the warm-up and joins them, so that it is single-threaded where it forks; each woken
// worker runs them again for real). Other runs (strategies whose ranks are not each a Trainer,
// mpirun) end the template at once with a warning, and restarts start a new process as before.
#pragma once

#include <functional>
#include <string>

namespace dtrain::train {

// Whether this process is a fork server's template (DTRAIN_FORK_SERVER is set and this process is
// not a worker it forked).
bool is_fork_template();

// In a template, names the process "dtrain-template". Call it first thing in main.
void name_fork_template_process();

// In a template that cannot serve this run: prints `warn: fork server: <why>; ...` and ends the
// process with status 0 (the supervisor then starts new processes, and says so).
[[noreturn]] void refuse_fork_template(const std::string& why);

// In a template: checks that the process is single-threaded, then forks workers on the
// supervisor's requests until it goes away (the template never returns). Returns in a forked
// worker once the supervisor has woken it; `in_worker` runs in each worker before it says it is
// ready.
void serve_forks(const std::function<void()>& in_worker);

// In a template, before its warm-up: installs the shared scratch arena (base/shared_scratch.h), so
// that every tensor of 64 KiB or more allocated from then on is shared with the workers; a warning
// when it cannot (the workers' first steps are then cold). What a worker must not share with the
// template (the data) must be allocated before this.
void install_fork_scratch();

// In a template after its warm-up: ends the threads of the process-wide compute pool and of
// OpenBLAS (no thread may run across a fork), then serve_forks with each worker mapping the arena
// (shared_scratch::populate). Returns in a woken worker, its process-wide compute pool as it was.
void serve_forks_after_warm_up();

}  // namespace dtrain::train
