// A graceful stop asked for by a signal: SIGTERM (what Slurm, Kubernetes and most schedulers send
// before they kill a preempted job), SIGINT (Ctrl-C) or SIGHUP (the terminal closed, the ssh
// session dropped).
//
// install_stop_handlers() makes the first such signal only raise a flag, which the training loop
// reads at its step boundaries (the ranks agree on it in one small collective, so that all of them
// stop after the same step): it saves a checkpoint and ends with exit status 128 + the signal, as
// a shell reports a process killed by it. The handler then restores the default action, so a
// second signal ends the process at once (a user who presses Ctrl-C twice is not kept waiting).
// The handler is async-signal-safe: it stores to a lock-free atomic and calls signal().
//
// A process that starts with SIGHUP ignored (nohup, `trap '' HUP`) keeps it ignored: it was asked
// to outlive its terminal, and trains on.
#pragma once

namespace dtrain {

// Installs the handlers for SIGTERM, SIGINT and SIGHUP (SIGHUP unless it is ignored); idempotent.
void install_stop_handlers();

// A line (with its newline) that the first SIGINT writes to stderr at once, from the handler, so
// that a user who pressed Ctrl-C learns it was heard even while a rank is stuck in a wait and no
// step boundary comes soon; nullptr (the default) writes nothing. SIGTERM never writes. `line`
// must outlive the process (a string literal).
void set_sigint_note(const char* line);

// The signal that asked for a stop (SIGTERM, SIGINT, SIGHUP), or 0.
int stop_requested();

// For tests: pretend `signal` arrived (0 clears the request).
void set_stop_request_for_test(int signal);

// "SIGTERM", "SIGINT", "SIGHUP" or "a signal".
const char* stop_signal_name(int signal);

}  // namespace dtrain
