#include "dtrain/train/launch.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "dtrain/base/env.h"
#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/comm/rank_threads.h"
#include "dtrain/comm/spawn_process_ranks.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/fork_server.h"
#include "dtrain/train/memory_budget.h"
#include "dtrain/train/standby.h"
#include "dtrain/train/strategy_registry.h"
#include "dtrain/train/supervisor.h"

namespace dtrain::train {

namespace fs = std::filesystem;

// Rank threads with one compute thread each are bound to distinct CPUs when they fit (rank r on
// the r-th CPU this process may use): left free, the scheduler sometimes stacks both ranks of a
// 2-CPU machine on one core for a whole run (the measurements: docs/PERFORMANCE.md,
// docs/INPROC.md). Not pinned: ranks with a compute pool (its threads would inherit the one CPU),
// more ranks than CPUs, strategies whose ranks run threads of their own (colocated parameter
// servers: StrategyInfo::pin_ranks). DTRAIN_PIN_RANKS, when set, decides instead (1: pin, 0:
// never).
comm::RankPinning rank_pinning(const Config& config) {
  if (env::get("DTRAIN_PIN_RANKS").has_value()) return comm::RankPinning::kFromEnvironment;
  const bool alone = find_strategy(config.parallel.strategy).pin_ranks && config.train.threads == 1;
  return alone ? comm::RankPinning::kWhenRanksFit : comm::RankPinning::kNever;
}

comm::CommOptions comm_options(const Config& config) {
  comm::CommOptions options;
  if (config.parallel.comm_timeout_seconds > 0.0) {
    options.timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(config.parallel.comm_timeout_seconds * 1000.0));
  }
  options.allreduce_algorithm = config.parallel.allreduce;
  options.stall_warning = std::chrono::milliseconds(
      static_cast<std::int64_t>(config.parallel.stall_warning_seconds * 1000.0));
  // The hierarchical allreduce's groups: the threads of one process.
  options.local_size = static_cast<int>(config.parallel.workers);
  return options;
}

namespace {

// One rank's run, on its own thread: its log prefix, its own compute pool of train.threads
// threads, the shared data; rank 0's summary is kept. A strategy with roles (parameter servers)
// runs its own part of the rank (StrategyInfo::run_rank).
void train_rank(comm::Communicator& comm, const Config& config, const TrainerOptions& options,
                const std::shared_ptr<const RunData>& data, RunSummary& summary,
                std::mutex& summary_mutex) {
  log::set_rank(comm.rank(), comm.size());
  ScopedComputePool pool(static_cast<int>(config.train.threads));
  std::optional<RunSummary> mine;
  const StrategyInfo& strategy = find_strategy(config.parallel.strategy);
  if (strategy.run_rank) {
    mine = strategy.run_rank(comm, config, options, data);
  } else {
    TrainerOptions rank_options = options;
    rank_options.comm = &comm;
    rank_options.data = data;
    Trainer trainer(config, rank_options);
    mine = trainer.run();
  }
  if (comm.rank() == 0 && mine) {
    std::lock_guard<std::mutex> lock(summary_mutex);
    summary = std::move(*mine);
  }
}

// Under mpirun: this process's parallel.workers threads are ranks of the whole job. A failure is
// printed here and ends the job at once through MPI_Abort: a plain exit would leave the other
// processes waiting for their deadlines.
RunSummary run_under_mpi(const Config& config, const TrainerOptions& options) {
  RunSummary summary;
  std::mutex summary_mutex;
  const std::optional<FileIdentity> summary_before =
      file_identity((fs::path(options.run_dir) / "summary.json").string());
  try {
    auto data = std::make_shared<const RunData>(load_run_data(config.data));
    // This process's replicas, before any is built (memory_budget.h); a model built in code has
    // no ModelSpec to estimate it from.
    const int workers = static_cast<int>(config.parallel.workers);
    if (!options.make_model) {
      check_memory_budget(
          config, model_spec(config.model, data->train.sample_shape(), data->train.num_classes),
          workers, workers * comm::mpi_world_size(), run_data_bytes(*data));
    }
    comm::spawn_process_ranks(
        static_cast<int>(config.parallel.workers),
        [&](comm::Communicator& comm) {
          train_rank(comm, config, options, data, summary, summary_mutex);
        },
        comm_options(config));
  } catch (const std::exception& e) {
    std::string message = e.what();
    for (char& ch : message) ch = ch == '\n' ? ' ' : ch;
    // As with ranks as threads (run_training): a process whose communication failed after rank
    // 0 wrote the run's results (summary.json, since this process started) costs the run
    // nothing: a parameter-server worker counted dead that woke after the servers had finished.
    // It warns and ends as the others did, not with an abort of the job. (The run folder is
    // rank 0's: on hosts without a shared file system this process cannot see it, and the error
    // stands.)
    const fs::path written = fs::path(options.run_dir) / "summary.json";
    if (dynamic_cast<const comm::CommError*>(&e) != nullptr && comm::mpi_world_rank() != 0 &&
        written_since(written.string(), summary_before)) {
      log::warn(
          "process {} of {}: {} (after rank 0 had finished the run and written its results, "
          "which stand)",
          comm::mpi_world_rank(), comm::mpi_world_size(), message);
      return summary;
    }
    const std::string line = fmt::format("error: process {} of {}: {}", comm::mpi_world_rank(),
                                         comm::mpi_world_size(), message);
    fmt::print(stderr, "{}\n", line);
    append_to_error_file(line);
    std::fflush(stderr);
    // The exit codes of the dtrain main: 4 for a failed rank or a deadline (a supervisor
    // restarts those), 3 internal, 2 bad input.
    const int code = dynamic_cast<const comm::CommError*>(&e) != nullptr ? 4
                     : dynamic_cast<const InternalError*>(&e) != nullptr ? 3
                                                                         : 2;
    comm::mpi_abort(code);
  }
  return summary;
}

// In-process restarts (train.in_process_restarts, docs/FAULTS.md): a failed rank thread (its own
// error, a deadline, an injected fault) fails its world, and every rank thread ends; when all of
// them were joined (none left running: comm::detached_rank_threads) the process is sound, so the
// ranks start again in it, from the newest checkpoint (the memory tier's, with
// train.memory_checkpoint_every_steps), without a new process, a new data load or cold pages
// (freed heap memory is reused: base/allocator_tuning.h). Bad input (config, data, shapes,
// checkpoints) and internal errors are not restarted: they would fail alike.
bool restartable_in_process(const std::exception& e) {
  // A diverged loss diverges again at the same step (the run is deterministic). Its Error reaches
  // here as a CommError when a rank thread threw it (spawn_ranks keeps the message only).
  if (std::string_view(e.what()).find("training diverged:") != std::string_view::npos) {
    return false;
  }
  if (dynamic_cast<const comm::CommError*>(&e) != nullptr) return true;
  return dynamic_cast<const Error*>(&e) != nullptr &&
         dynamic_cast<const ConfigError*>(&e) == nullptr &&
         dynamic_cast<const DataError*>(&e) == nullptr &&
         dynamic_cast<const ShapeError*>(&e) == nullptr &&
         dynamic_cast<const CheckpointError*>(&e) == nullptr &&
         dynamic_cast<const InternalError*>(&e) == nullptr;
}

// Runs `attempt` (one try of the run, given whether it resumes) until it returns, restarting it
// in this process after a restartable failure while restarts are left; each restart is a line
// of restarts.jsonl with "in_process": true.
RunSummary with_in_process_restarts(
    const Config& config, const TrainerOptions& options,
    const std::function<RunSummary(const TrainerOptions&)>& attempt) {
  TrainerOptions current = options;
  const fs::path summary = fs::path(options.run_dir) / "summary.json";
  for (std::int64_t restart = 0;; ++restart) {
    Stopwatch ran;
    const std::optional<FileIdentity> summary_before = file_identity(summary.string());
    try {
      return attempt(current);
    } catch (const std::exception& e) {
      // A run that wrote its summary.json during this attempt had finished (a rank failed after
      // rank 0's end): a restart would find nothing left to train, so the error stands.
      const bool finished = written_since(summary.string(), summary_before);
      if (restart >= config.train.in_process_restarts || !restartable_in_process(e) || finished ||
          comm::detached_rank_threads() > 0 || stop_requested() != 0) {
        throw;
      }
      std::string cause = e.what();
      std::replace(cause.begin(), cause.end(), '\n', ' ');
      log::warn(
          "{}; restarting the ranks inside this process from the newest checkpoint "
          "(in-process restart {} of {}, train.in_process_restarts)",
          cause, restart + 1, config.train.in_process_restarts);
      const nlohmann::json record = {{"in_process", true},
                                     {"in_process_restart", restart + 1},
                                     {"at", now_iso8601()},
                                     {"attempt_seconds", ran.seconds()},
                                     {"cause", cause}};
      const std::string log_path = (fs::path(options.run_dir) / "restarts.jsonl").string();
      std::ofstream out(log_path, std::ios::app);
      out << record.dump() << "\n";
      if (!out) log::warn("cannot append to {}; restarting anyway", log_path);
      current.resume = true;
    }
  }
}

// A fork server's template whose ranks are threads (fork_server.h). A fork copies the calling
// thread only, so the template runs the ranks once with the shared scratch arena installed, each
// building its Trainer and running the warm-up forward and backward (Trainer::warm_up_as_standby,
// no collective but the Trainer's construction), and joins them; single-threaded again, it forks
// workers. A woken worker returns from here and runs the ranks for real (run_training): fresh
// Trainers allocate the same sizes again, and the arena's per-size free lists hand them the blocks
// the warm-up released, pages that the template populated and the worker mapped: no cold first
// step.
//
// Sharing is safe because exactly one process uses the arena at a time: the template never reads
// it after its warm-up (its Trainers are gone; what it keeps, the data, is private, loaded before
// the arena), a waiting worker only maps its pages, and the supervisor wakes the next worker only
// after it has reaped the dead one. What a woken worker finds there is the template's warm-up or a
// killed worker's leftovers, and it reads none of it: its Trainers are built afresh (parameters
// initialised, then overwritten by the checkpoint it resumes from; gradients zeroed each step;
// parameters, gradients and optimizer state are PlacedFloats on the private heap anyway), and
// every tensor in the arena is written (or zeroed) before it is read, as in any process whose
// heap memory is reused.
void serve_rank_threads_as_fork_template(const Config& config, const TrainerOptions& options,
                                         const std::shared_ptr<const RunData>& data, int workers) {
  install_fork_scratch();
  try {
    comm::spawn_ranks(
        workers,
        [&](comm::Communicator& comm) {
          log::set_rank(comm.rank(), comm.size());
          ScopedComputePool pool(static_cast<int>(config.train.threads));
          TrainerOptions rank_options = options;
          rank_options.comm = &comm;
          rank_options.data = data;
          Trainer trainer(config, rank_options);
          trainer.warm_up_as_standby();
        },
        comm_options(config), rank_pinning(config));
  } catch (const std::exception& e) {
    std::string cause = e.what();
    std::replace(cause.begin(), cause.end(), '\n', ' ');
    refuse_fork_template(fmt::format("its warm-up of {} rank threads failed: {}", workers, cause));
  }
  serve_forks_after_warm_up();  // returns in a woken worker
}

}  // namespace

RunSummary run_training(const Config& config, const TrainerOptions& options) {
  // The start-up watchdog of MPI_Init (initialised by the first mpi_world_rank() below) waits as
  // long as every other wait of the run.
  if (comm::launched_by_mpirun()) comm::set_mpi_start_timeout(comm_options(config).timeout);
  // (A warm standby says nothing: the run it stands by for has said it.)
  if (!is_standby() && !is_fork_template() &&
      (!comm::launched_by_mpirun() || comm::mpi_world_rank() == 0)) {
    for (const std::string& ignored : ignored_settings(config)) log::warn("{}", ignored);
  }
  const StrategyInfo& strategy = find_strategy(config.parallel.strategy);
  if (options.make_model) check_takes_model_factory(strategy);
  // A warm standby (standby.h) of a strategy whose ranks are not each a Trainer (Hogwild!,
  // parameter servers, federated averaging) waits here, before anything runs: a server would
  // start serving, a Hogwild! thread training. The others wait in Trainer::run, built and warm.
  if (strategy.run_whole || strategy.run_rank) wait_until_activated();
  const int workers = strategy.run_whole || comm::launched_by_mpirun() ? 0
                      : strategy.thread_ranks ? strategy.thread_ranks(config)
                                              : static_cast<int>(config.parallel.workers);
  // A fork server's template (fork_server.h) serves runs whose ranks are each a Trainer: one on
  // this thread (Trainer::run) or ranks that are threads (serve_rank_threads_as_fork_template).
  // A strategy's own rank function or whole run may keep threads, or state, across the warm-up.
  if (is_fork_template() &&
      (strategy.run_whole || strategy.run_rank || comm::launched_by_mpirun())) {
    refuse_fork_template(
        fmt::format("it serves runs whose ranks are each a Trainer, and this one runs {}",
                    strategy.run_whole || strategy.run_rank
                        ? fmt::format("parallel.strategy = \"{}\"", config.parallel.strategy)
                        : std::string("under mpirun")));
  }
  if (strategy.run_whole) return strategy.run_whole(config, options);
  if (comm::launched_by_mpirun()) return run_under_mpi(config, options);
  if (workers == 1 && !strategy.run_rank) {
    return with_in_process_restarts(config, options, [&](const TrainerOptions& attempt) {
      Trainer trainer(config, attempt);
      return trainer.run();
    });
  }
  validate(config);
  auto data = std::make_shared<const RunData>(load_run_data(config.data));
  // Every replica of this process at once, before any is built (memory_budget.h); parameter
  // servers together hold one more copy, not one per server. (Not for a model built in code: no
  // ModelSpec describes it.)
  if (!options.make_model) {
    check_memory_budget(
        config, model_spec(config.model, data->train.sample_shape(), data->train.num_classes),
        std::min(workers, static_cast<int>(config.parallel.workers) + 1), workers,
        run_data_bytes(*data));
  }
  // The data above is private memory: loaded before the template installs its shared arena.
  if (is_fork_template()) serve_rank_threads_as_fork_template(config, options, data, workers);
  return with_in_process_restarts(config, options, [&](const TrainerOptions& attempt) {
    RunSummary summary;
    std::mutex summary_mutex;
    bool rank0_finished = false;
    const std::optional<FileIdentity> summary_before =
        file_identity((fs::path(attempt.run_dir) / "summary.json").string());
    try {
      comm::spawn_ranks(
          workers,
          [&](comm::Communicator& comm) {
            train_rank(comm, config, attempt, data, summary, summary_mutex);
            if (comm.rank() == 0) {
              std::lock_guard<std::mutex> lock(summary_mutex);
              rank0_finished = true;
            }
          },
          comm_options(config), rank_pinning(config));
    } catch (const comm::CommError& e) {
      // A rank whose communication failed after rank 0 finished the run and wrote its results
      // (summary.json, this attempt) costs the run nothing: a parameter-server worker counted
      // dead that woke after the servers had finished. Its error is a warning. Any other error,
      // or one before rank 0 finished (a stop by a signal writes no summary), stands.
      bool finished = false;
      {
        std::lock_guard<std::mutex> lock(summary_mutex);
        finished = rank0_finished;
      }
      const fs::path written = fs::path(attempt.run_dir) / "summary.json";
      if (!finished || !written_since(written.string(), summary_before)) {
        throw;
      }
      log::warn("{} (after rank 0 had finished the run and written its results, which stand)",
                e.what());
    }
    return summary;
  });
}

}  // namespace dtrain::train
