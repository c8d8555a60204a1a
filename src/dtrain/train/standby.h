// Warm standby (docs/FAULTS.md, "Warm standby"): a `dtrain train --resume` process that the
// supervisor starts ahead of a failure. It loads the data, builds the model and its optimizer,
// and then waits, asleep on a pipe, before it reads any checkpoint; when the running child dies,
// the supervisor writes one byte and the standby goes on from the newest checkpoint there is at
// that moment. A restart then costs a pipe write and the checkpoint's read instead of a new
// process, its data and its model.
//
// The supervisor passes the pipe's read end as DTRAIN_STANDBY_FD. While it waits the process is
// named "dtrain-standby" (ps, pgrep -x dtrain finds only the running child) and prints nothing;
// if the supervisor goes away (the pipe's write end closes), or it is sent SIGTERM or SIGINT, it
// exits with status 0, silently. Strategies whose ranks are not each a Trainer (Hogwild!,
// parameter servers, federated) wait at the start of run_training instead, before anything runs,
// and are not warmed up.
#pragma once

namespace dtrain::train {

// Whether this process is a standby still waiting (DTRAIN_STANDBY_FD is set and the supervisor
// has not woken it).
bool is_standby();

// In a standby, names the process "dtrain-standby" until it is activated. Call it first thing in
// main, on the main thread (whose name is the process's).
void name_standby_process();

// In a standby: blocks until the supervisor activates it (returns) or goes away (ends the
// process). Called by every rank thread at the start of Trainer::run; the first call waits, the
// others wait for it; later calls and calls outside a standby return at once.
void wait_until_activated();

}  // namespace dtrain::train
