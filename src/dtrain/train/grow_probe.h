// Elastic membership asks before it grows a job back: is one more worker available?
// (docs/FAULTS.md "Elastic membership"). The question goes to a command, as a cluster scheduler
// is asked: `--grow-when CMD` runs `/bin/sh -c CMD`; under `--mpirun` without it the question is
// `mpirun <the job's options, -np N+1> true`, which fails while mpirun cannot place N + 1
// processes (a host down, its slots taken). Without either, one machine has no one to ask and the
// grow follows --grow-after alone.
//
// The command runs with DTRAIN_GROW_TO=<workers after the grow> in its environment, its stdin
// from /dev/null and its output in `log_path` (the last probe's, for the user to read), in a
// process group of its own; exit status 0 within `deadline` means yes. Past the deadline the
// group is killed and the answer is no. Cost: one process start per question (milliseconds for
// a shell; mpirun's own start-up, about 0.1-1 s, for the mpirun probe), asked at most once per
// --grow-after seconds.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace dtrain::train {

struct GrowAnswer {
  bool available = false;
  std::string why;  // "exit status 1", "timed out after 10 s", "cannot start /bin/sh: ..."
};

GrowAnswer ask_grow_probe(const std::vector<std::string>& argv, long long grow_to,
                          const std::string& log_path, std::chrono::milliseconds deadline);

}  // namespace dtrain::train
