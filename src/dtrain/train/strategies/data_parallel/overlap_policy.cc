#include "dtrain/train/strategies/data_parallel/overlap_policy.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

std::string plural(long n, const char* word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

}  // namespace

OverlapDecision decide_overlap(const std::string& setting, const OverlapInputs& in) {
  DTRAIN_CHECK(in.ranks_in_process >= 1 && in.processes_on_host >= 1 && in.threads_per_rank >= 1 &&
                   in.process_cpus >= 1 && in.host_cpus >= 1,
               "overlap inputs: {} ranks in the process, {} processes on the host, {} threads per "
               "rank, {} process CPUs, {} host CPUs",
               in.ranks_in_process, in.processes_on_host, in.threads_per_rank, in.process_cpus,
               in.host_cpus);
  if (setting == "true") return {true, "on"};
  if (setting == "false") return {false, "off"};
  DTRAIN_CHECK(setting == "auto", "data_parallel.overlap '{}'", setting);
  const long per_rank = in.threads_per_rank + 1L;
  const std::string threads =
      fmt::format("({} compute + 1 communication thread)", in.threads_per_rank);
  const long in_process = in.ranks_in_process * per_rank;
  if (in_process > in.process_cpus) {
    return {false, fmt::format("off (auto: {} in this process x {} exceed its {})",
                               plural(in.ranks_in_process, "rank"), threads,
                               plural(in.process_cpus, "CPU"))};
  }
  const long on_host = static_cast<long>(in.ranks_in_process) * in.processes_on_host;
  if (on_host * per_rank > in.host_cpus) {
    return {false, fmt::format("off (auto: {} on this host x {} exceed its {})",
                               plural(on_host, "rank"), threads, plural(in.host_cpus, "CPU"))};
  }
  return {true, fmt::format("on (auto: {} on this host x {} fit its {})", plural(on_host, "rank"),
                            threads, plural(in.host_cpus, "CPU"))};
}

OverlapInputs overlap_inputs(int ranks_in_process, int threads_per_rank) {
  return {ranks_in_process, processes_on_host(), threads_per_rank, process_cpus(), host_cpus()};
}

int process_cpus() {
  cpu_set_t allowed;
  if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) == 0) {
    return std::max(1, CPU_COUNT(&allowed));
  }
  return host_cpus();
}

int host_cpus() { return static_cast<int>(std::max(1L, sysconf(_SC_NPROCESSORS_ONLN))); }

int processes_on_host() {
  return static_cast<int>(std::max<std::int64_t>(1, env::get_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1)));
}

}  // namespace dtrain::train
