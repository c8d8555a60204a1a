// Whether gradient-bucket allreduces run during backward (overlap) or after it.
//
// Overlap moves each bucket's allreduce onto the rank's communication thread, which only pays
// when that thread has a CPU of its own: where the compute threads already take every CPU, the
// communication thread time-slices with backward and its spin-waits steal the compute thread's
// core. Measured on the 2-CPU development VM (Fashion-MNIST MLP, 2 workers, docs/PARALLEL.md):
// overlap 96,570 samples/s against 118,304 without, so "auto" turns it off there.
//
// parallel.overlap = "auto" (the default) overlaps when
//     cpus >= ranks_on_host x (threads_per_rank + 1)
// (every rank's compute threads plus its communication thread fit on the CPUs this process may
// use); "true" and "false" force it.
#pragma once

#include <string>

namespace dtrain::train {

struct OverlapDecision {
  bool overlap = false;
  std::string reason;  // for the run banner: "auto: 2 ranks x (1 compute + 1 communication) ..."
};

// setting: "auto", "true" or "false" (Config validates it); ranks_on_host >= 1, threads_per_rank
// >= 1, cpus >= 1.
OverlapDecision decide_overlap(const std::string& setting, int ranks_on_host, int threads_per_rank,
                               int cpus);

// CPUs this process may run on (its main thread's affinity mask: taskset, cpusets and mpirun's
// binding count), whichever thread asks.
int cpus_available();

// Processes of this job on this host: OMPI_COMM_WORLD_LOCAL_SIZE under Open MPI's mpirun, else 1.
int processes_on_host();

}  // namespace dtrain::train
