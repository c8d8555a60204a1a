#include "dtrain/train/launch.h"

#include <fmt/format.h>

#include <chrono>
#include <memory>
#include <mutex>

#include "dtrain/base/log.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"

namespace dtrain::train {
namespace {

comm::CommOptions comm_options(const Config& config) {
  comm::CommOptions options;
  if (config.parallel.comm_timeout_seconds > 0.0) {
    options.timeout = std::chrono::milliseconds(
        static_cast<std::int64_t>(config.parallel.comm_timeout_seconds * 1000.0));
  }
  options.allreduce_algorithm = config.parallel.allreduce;
  return options;
}

}  // namespace

RunSummary run_training(const Config& config, const TrainerOptions& options) {
  const auto workers = static_cast<int>(config.parallel.workers);
  if (workers == 1) {
    Trainer trainer(config, options);
    return trainer.run();
  }
  validate(config);
  auto data = std::make_shared<const RunData>(load_run_data(config.data));
  RunSummary summary;
  std::mutex summary_mutex;
  comm::spawn_ranks(
      workers,
      [&](comm::Communicator& comm) {
        log::set_rank(comm.rank(), comm.size());
        ScopedComputePool pool(static_cast<int>(config.train.threads));
        TrainerOptions rank_options = options;
        rank_options.comm = &comm;
        rank_options.data = data;
        Trainer trainer(config, rank_options);
        RunSummary mine = trainer.run();
        if (comm.rank() == 0) {
          std::lock_guard<std::mutex> lock(summary_mutex);
          summary = std::move(mine);
        }
      },
      comm_options(config));
  return summary;
}

}  // namespace dtrain::train
