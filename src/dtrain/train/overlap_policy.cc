#include "dtrain/train/overlap_policy.h"

#include <fmt/format.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"

namespace dtrain::train {

OverlapDecision decide_overlap(const std::string& setting, int ranks_on_host, int threads_per_rank,
                               int cpus) {
  DTRAIN_CHECK(ranks_on_host >= 1 && threads_per_rank >= 1 && cpus >= 1,
               "ranks_on_host {}, threads_per_rank {}, cpus {}", ranks_on_host, threads_per_rank,
               cpus);
  if (setting == "true") return {true, "on"};
  if (setting == "false") return {false, "off"};
  DTRAIN_CHECK(setting == "auto", "parallel.overlap '{}'", setting);
  const long needed = static_cast<long>(ranks_on_host) * (threads_per_rank + 1);
  const bool fits = cpus >= needed;
  return {fits, fmt::format("{} (auto: {} rank{} on this host x ({} compute + 1 communication "
                            "thread) {} {} CPU{})",
                            fits ? "on" : "off", ranks_on_host, ranks_on_host == 1 ? "" : "s",
                            threads_per_rank, fits ? "fit" : "exceed", cpus, cpus == 1 ? "" : "s")};
}

int cpus_available() {
  // The process's mask (its main thread's), not the calling thread's: rank threads may already be
  // pinned to one CPU each (comm/spawn_ranks.h).
  cpu_set_t allowed;
  if (sched_getaffinity(getpid(), sizeof(allowed), &allowed) == 0)
    return std::max(1, CPU_COUNT(&allowed));
  return std::max(1u, std::thread::hardware_concurrency());
}

int processes_on_host() {
  return static_cast<int>(std::max<std::int64_t>(1, env::get_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1)));
}

}  // namespace dtrain::train
