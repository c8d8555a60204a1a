#include "dtrain/train/strategies/parameter_server/ps_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/ps/client.h"
#include "dtrain/ps/server.h"
#include "dtrain/train/strategies/parameter_server/parameter_server_strategy.h"
#include "dtrain/train/strategies/parameter_server/ticket_plan.h"

namespace dtrain::train {
namespace {

// A histogram as a list: entry i counts the gradients of staleness i (the last of
// ps::kHistogramBins entries: i or more), trimmed after the last non-empty bin.
nlohmann::json histogram_json(const std::vector<std::int64_t>& bins) {
  std::size_t used = bins.size();
  while (used > 0 && bins[used - 1] == 0) --used;
  return std::vector<std::int64_t>(bins.begin(), bins.begin() + static_cast<std::ptrdiff_t>(used));
}

}  // namespace

ps::Compression ps_compression(const Config& config) {
  const auto& p = config.parameter_server;
  ps::Compression out;
  out.push = compress::parse_codec(p.compression);
  if (p.error_feedback != "auto") out.push.error_feedback = p.error_feedback == "true";
  out.pull = compress::parse_codec(p.pull_compression);
  out.seed = static_cast<std::uint64_t>(config.train.seed);
  return out;
}

int ps_thread_ranks(const Config& config) {
  const auto& p = config.parameter_server;
  const std::int64_t workers = config.parallel.workers;
  return static_cast<int>(p.colocate_servers ? workers : workers + p.servers);
}

std::optional<RunSummary> run_ps_rank(comm::Communicator& comm, const Config& config,
                                      const TrainerOptions& options,
                                      const std::shared_ptr<const RunData>& data,
                                      const std::function<void(Trainer&)>& after_run) {
  const auto servers = static_cast<int>(config.parameter_server.servers);
  const bool colocate = config.parameter_server.colocate_servers;
  const int workers = colocate ? comm.size() : comm.size() - servers;
  if (workers < 1 || (colocate && servers > workers)) {
    throw ConfigError(fmt::format(
        "parameter_server.servers = {} {} the job's {} ranks; start more ranks (mpirun -np) or use "
        "fewer "
        "servers",
        servers, colocate ? "cannot each live on a worker among" : "leaves no workers among",
        comm.size()));
  }
  const bool is_worker = colocate || comm.rank() < workers;
  // The server this rank hosts (-1: none): ranks W .. R-1, or colocated workers 0 .. S-1.
  const int server_index = colocate ? (comm.rank() < servers ? comm.rank() : -1)
                                    : (is_worker ? -1 : comm.rank() - workers);
  // Both splits are collective over every rank, in the same order everywhere.
  std::unique_ptr<comm::Communicator> ps_comm = comm.split(0, comm.rank());
  std::unique_ptr<comm::Communicator> worker_comm =
      comm.split(is_worker ? 0 : comm::kUndefinedColor, comm.rank());
  // The servers learn the model's tensors (offsets, weight-decay flags) from the same config.
  const auto model = nn::build_model(
      model_spec(config.model, data->train.sample_shape(), data->train.num_classes));
  const ps::ShardLayout layout(model->store().num_params(), servers);
  std::vector<int> worker_ranks;
  std::vector<int> server_ranks;
  for (int r = 0; r < workers; ++r) worker_ranks.push_back(r);
  for (int s = 0; s < servers; ++s) server_ranks.push_back(colocate ? s : workers + s);
  const auto timeout = comm.options().timeout;
  const bool ticketed = config.parameter_server.consistency != "bsp";

  auto serve = [&, server_index] {
    const int index = server_index;
    ps::ServerOptions server;
    server.consistency = ps::parse_consistency(config.parameter_server.consistency);
    server.staleness = config.parameter_server.staleness;
    server.backup_workers = config.parameter_server.backup_workers;
    if (index == 0 && ticketed) {
      server.tickets =
          config.train.epochs * ps_tickets_per_epoch(config, workers, data->train.size());
    }
    server.optimizer = optimizer_config(config.optim);
    for (const auto& entry : model->store().param_entries()) {
      server.segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
    }
    server.timeout = timeout;
    server.worker_timeout = timeout;
    server.stall_warning = comm.options().stall_warning;
    server.compression = ps_compression(config);
    // Robust aggregation and attacks: the data_parallel keys (--aggregator, --attack,
    // --byzantine) apply to the workers' pushes (bsp; docs/ROBUST.md).
    server.aggregator = config.data_parallel.aggregator;
    server.attack = config.data_parallel.attack;
    server.byzantine = static_cast<int>(config.data_parallel.byzantine);
    server.seed = config.train.seed;
    ps::Server(ps_comm->transport(), index, layout, worker_ranks, std::move(server)).serve();
  };
  if (!is_worker) {
    serve();
    return std::nullopt;
  }
  // A colocated server runs beside this rank's worker, on a thread of its own; its error (a bsp
  // deadline naming a worker) reaches the workers as replies first, and is rethrown here after.
  std::exception_ptr server_error;
  std::thread server_thread;
  if (server_index >= 0) {
    server_thread = std::thread([&, rank = comm.rank(), size = comm.size()] {
      log::set_rank(rank, size);
      try {
        serve();
      } catch (...) {
        server_error = std::current_exception();
      }
    });
  }
  struct Joiner {
    std::thread& thread;
    ~Joiner() {
      if (thread.joinable()) thread.join();
    }
  } joiner{server_thread};
  // Workers wait longer than servers: a server's verdict naming a missing worker arrives first.
  ps::Client client(ps_comm->transport(), layout, server_ranks, workers,
                    2 * timeout + std::chrono::seconds(5), ps_compression(config));
  client.set_stall_warning(comm.options().stall_warning);
  TrainerOptions worker = options;
  worker.comm = worker_comm.get();
  worker.data = data;
  worker.make_strategy = [&client](const StrategyContext& context) {
    return std::make_unique<ParameterServerWorker>(context, client);
  };
  Trainer trainer(config, worker);
  RunSummary summary;
  try {
    summary = trainer.run();
  } catch (const ps::EvictedError& e) {
    // Counted dead while it was silent (async / ssp): the servers and the other workers went on
    // without it. Worker 0 writes the run's results, so its eviction fails the run.
    if (comm.rank() == 0) throw;
    log::warn("{}: this worker stops here, the run goes on without it", e.what());
    if (server_thread.joinable()) server_thread.join();
    if (server_error) std::rethrow_exception(server_error);
    return std::nullopt;
  }
  if (after_run) after_run(trainer);
  if (server_thread.joinable()) server_thread.join();
  if (server_error) std::rethrow_exception(server_error);
  if (comm.rank() != 0) return std::nullopt;
  return summary;
}

nlohmann::json ps_summary(const Config& config, int workers,
                          const std::vector<ps::ServerStats>& servers,
                          std::int64_t worker0_dropped) {
  const auto& p = config.parameter_server;
  nlohmann::json out = {{"strategy", "parameter_server"},
                        {"consistency", p.consistency},
                        {"workers", workers},
                        {"servers", p.servers}};
  if (p.consistency == "ssp") out["staleness_bound"] = p.staleness;
  if (p.consistency == "async") out["pull_every"] = p.pull_every;
  if (p.consistency == "bsp") out["backup_workers"] = p.backup_workers;
  std::int64_t max_staleness = 0;
  std::int64_t dropped = 0;
  std::vector<std::int64_t> staleness(ps::kHistogramBins, 0);
  nlohmann::json rows = nlohmann::json::array();
  for (std::size_t s = 0; s < servers.size(); ++s) {
    const ps::ServerStats& stats = servers[s];
    max_staleness = std::max(max_staleness, stats.max_staleness);
    dropped += stats.dropped;
    for (std::size_t i = 0; i < staleness.size(); ++i) staleness[i] += stats.staleness[i];
    std::vector<int> dead;
    for (std::size_t w = 0; w < stats.dead.size(); ++w) {
      if (stats.dead[w] != 0) dead.push_back(static_cast<int>(w));
    }
    rows.push_back({{"server", s},
                    {"updates", stats.version},
                    {"gradients_applied", stats.applied},
                    {"gradients_dropped", stats.dropped},
                    {"max_staleness", stats.max_staleness},
                    {"max_update_lag", stats.max_update_lag},
                    {"staleness_histogram", histogram_json(stats.staleness)},
                    {"update_lag_histogram", histogram_json(stats.update_lag)},
                    {"pushes_per_worker", stats.pushes},
                    {"dead_workers", dead}});
  }
  // Every push reaches every server, so the servers' histograms count the same gradients; the
  // summed one counts each (gradient, server) pair.
  out["max_staleness"] = max_staleness;
  out["staleness_histogram"] = histogram_json(staleness);
  out["gradients_dropped"] = dropped;
  out["worker0_dropped_steps"] = worker0_dropped;
  out["per_server"] = rows;
  return out;
}

}  // namespace dtrain::train
