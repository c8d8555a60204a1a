// dtrain check: the pre-flight of experiments/preflight.h, printed as one screen and a verdict.
// Exit 0 when ready, 2 when a problem was found (every process of an mpirun job alike).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "cli_checks.h"
#include "commands.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/experiments/preflight.h"

namespace dtrain::apps {

Command add_check_command(CLI::App& app) {
  auto options = std::make_shared<experiments::PreflightOptions>();
  auto timeout_seconds = std::make_shared<double>(10.0);
  CLI::App* sub = app.add_subcommand(
      "check",
      "Pre-flight of the ranks a run would use, before the run: every rank reachable (a barrier "
      "with a deadline that names the missing ones), each ordered pair's latency (half a round "
      "trip of 8 B) and bandwidth (1 MiB one way), a link much slower than the median named "
      "(bandwidth < 1/2 or latency > 2x), each rank's clock against rank 0's, host names; with "
      "--config, the config valid, the model within memory and its data set readable on every "
      "rank. Prints one screen ending in `verdict: ready` (exit 0) or `verdict: N problems: ...` "
      "(exit 2).");
  sub->footer(R"(
Examples:
  dtrain check --workers 4                                  # 4 ranks as threads of this process
  mpirun -np 2 dtrain check                                 # one rank per process (MPI)
  mpirun -np 4 --host a,b dtrain check --config run.toml    # 2 hosts, their data and clocks
  dtrain check --workers 2 --config examples/fashion_mlp.toml --set data.path=/data/fmnist

Under mpirun, run it with the hosts, -np and --config of the real job: a host whose data path is
missing, a slow network link or a clock far off shows up here in seconds instead of minutes into
the run. Rank 0 prints; every process exits with the verdict's code.)");
  sub->add_option("--workers,-w", options->workers,
                  "ranks as threads of this process (default 2); under mpirun, threads per "
                  "process (default 1)")
      ->check(at_least(1));
  sub->add_option("--config,-c", options->config_path,
                  "a run's config: validated, its data set loaded on every rank, its model "
                  "checked against the memory available")
      ->check(non_empty_path());
  sub->add_option("--set", options->sets, "override a config key, e.g. --set data.path=/data")
      ->expected(1)
      ->take_all();
  sub->add_option("--timeout", *timeout_seconds,
                  "seconds every rank is waited for before it is named missing, and under mpirun "
                  "every process for MPI's start (default 10)")
      ->check(CLI::Range(0.1, 3600.0));
  sub->add_option("--bytes", options->large_bytes,
                  "message size of the bandwidth measurement (default 1048576)")
      ->check(at_least(8));
  return Command{sub, [sub, options, timeout_seconds] {
                   if (comm::launched_by_mpirun() && sub->count("--workers") == 0) {
                     options->workers = 1;
                   }
                   options->timeout = std::chrono::milliseconds(
                       static_cast<std::int64_t>(*timeout_seconds * 1000.0));
                   // MPI_Init's start-up watchdog (the first MPI call, in run_preflight) waits
                   // as long as the check's other waits.
                   if (comm::launched_by_mpirun()) {
                     comm::set_mpi_start_timeout(options->timeout,
                                                 sub->count("--timeout") > 0
                                                     ? "dtrain check --timeout"
                                                     : "dtrain check --timeout's default, 10 s");
                   }
                   const experiments::PreflightReport report = experiments::run_preflight(*options);
                   if (!comm::launched_by_mpirun() || comm::mpi_world_rank() == 0) {
                     fmt::print("{}", experiments::format_preflight(report));
                     std::fflush(stdout);
                   }
                   return report.problems.empty() ? 0 : 2;
                 }};
}

}  // namespace dtrain::apps
