// Whether gradient-bucket allreduces run during backward (overlap) or after it.
//
// Overlap moves each bucket's allreduce onto the rank's communication thread, which only pays
// when that thread has a CPU of its own: where the compute threads already take every CPU, the
// communication thread time-slices with backward and its spin-waits steal the compute thread's
// core: on a 2-CPU machine with 2 workers overlap measured slower than none (docs/PERFORMANCE.md),
// so "auto" turns it off there.
//
// data_parallel.overlap = "auto" (the default) overlaps when every rank's compute threads plus its
// communication thread fit both on this process's CPUs (its affinity mask: mpirun binds each
// process to a core by default) and on the host's online CPUs:
//     ranks_in_process  x (threads_per_rank + 1) <= process_cpus   and
//     ranks_on_host     x (threads_per_rank + 1) <= host_cpus,
// ranks_on_host = ranks_in_process x processes_on_host. "true" and "false" force it.
#pragma once

#include <string>

namespace dtrain::train {

struct OverlapInputs {
  int ranks_in_process = 1;   // parallel.workers
  int processes_on_host = 1;  // processes_on_host()
  int threads_per_rank = 1;   // train.threads
  int process_cpus = 1;       // process_cpus()
  int host_cpus = 1;          // host_cpus()
};

struct OverlapDecision {
  bool overlap = false;
  std::string reason;  // for the run banner: "off (auto: 2 ranks in this process x ...)"
};

// setting: "auto", "true" or "false" (Config validates it); every input >= 1.
OverlapDecision decide_overlap(const std::string& setting, const OverlapInputs& inputs);

// The inputs of this process: parallel.workers and train.threads from the caller, the rest
// measured (process_cpus, host_cpus, processes_on_host).
OverlapInputs overlap_inputs(int ranks_in_process, int threads_per_rank);

// CPUs this process may run on: its main thread's affinity mask (taskset, cpusets, mpirun's
// binding), whichever thread asks (rank threads may already be pinned to one CPU each).
int process_cpus();

// Online CPUs of this host.
int host_cpus();

// Processes of this job on this host: OMPI_COMM_WORLD_LOCAL_SIZE under Open MPI's mpirun, else 1.
int processes_on_host();

}  // namespace dtrain::train
