// Injected worker failures for experiments and the fault tests (docs/FAULTS.md): rank R fails after
// its global step S, once per run folder and step: a marker file there (.injected-fault, a line
// per failure) keeps a restart that resumes from before step S from failing there again.
//
//   "rank=1,step=40"     rank 1 fails after step 40: a rank that is a thread of this process
//                        throws (its error names the rank, the others fail promptly: a lost
//                        worker); a rank that is a process under mpirun kills itself with SIGKILL
//                        (a lost process or host)
//   "rank=1,every=20"    rank 1 fails after steps 20, 40, 60, ... (goodput experiments)
//   ""                   none
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::train {

struct FaultSpec {
  int rank = -1;  // -1: no fault
  std::int64_t step = 0;
  std::int64_t every = 0;  // > 0: after every multiple of it instead of after `step`
};

// Parses the forms above; ConfigError naming the text and the accepted form otherwise.
FaultSpec parse_fault(const std::string& text);

// Fails as the spec says when `rank` has just finished global step `step` and the run folder
// `run_dir` has no marker yet (it writes one first); nothing otherwise. `process_rank`: the rank
// is the only one of a process started by mpirun (it dies whole).
void inject_fault(const FaultSpec& spec, int rank, std::int64_t step, bool process_rank,
                  const std::string& run_dir);

}  // namespace dtrain::train
