#include "dtrain/experiments/scaling_benchmark.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/data/batch_plan.h"
#include "dtrain/data/dataset.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/train/launch.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/statistics.h"
#include "dtrain/train/straggler.h"
#include "dtrain/train/strategies/hogwild/hogwild_engine.h"
#include "dtrain/train/strategy_registry.h"
#include "dtrain/train/trainer.h"

namespace dtrain::experiments {

// Written inside dtrain::train before the experiments left it; its names read unqualified here.
using namespace dtrain::train;  // NOLINT(google-build-using-namespace)

void check_scaling_benchmark(const Config& config, const ScalingBenchmarkOptions& options) {
  // Strategies with one Trainer per rank (allreduce, local_sgd) run their own steps here;
  // Hogwild! its epochs; ranks with roles (parameter servers) are compared by `dtrain sweep`.
  const std::string& strategy = config.parallel.strategy;
  const StrategyInfo& info = find_strategy(strategy);
  if (strategy != "hogwild" && (!info.make || info.run_rank)) {
    throw ConfigError(fmt::format(
        "bench scaling: parallel.strategy = \"{}\" is not measured here; it measures "
        "\"allreduce\" (data parallelism), \"local_sgd\" and \"hogwild\"; for parameter servers "
        "compare runs with `dtrain sweep --modes`",
        strategy));
  }
  if (options.workers.empty()) throw ConfigError("bench scaling: --workers names no count");
  std::set<int> seen;
  for (int w : options.workers) {
    if (w < 1 || w > kMaxWorkers || !seen.insert(w).second) {
      throw ConfigError(fmt::format(
          "bench scaling: --workers {}: each count must be in [1, {}] and appear once, e.g. 1,2",
          fmt::join(options.workers, ","), kMaxWorkers));
    }
  }
  for (int w : options.workers) check_straggler_rank(config.parallel.straggler, w);
  if (options.rounds < 1 || options.steps < 1 || options.warmup_steps < 0) {
    throw ConfigError(fmt::format(
        "bench scaling: rounds and steps must be >= 1 and warmup >= 0 (got rounds {}, steps {}, "
        "warmup {})",
        options.rounds, options.steps, options.warmup_steps));
  }
  if (comm::launched_by_mpirun()) {
    throw ConfigError(
        "bench scaling runs its ranks as threads of one process; start it without mpirun");
  }
}

namespace {

// Round r's order of the worker-count indices: as given for even r, reversed for odd r.
std::vector<std::size_t> round_order(std::size_t counts, int round) {
  std::vector<std::size_t> order(counts);
  for (std::size_t i = 0; i < counts; ++i) order[i] = round % 2 == 0 ? i : counts - 1 - i;
  return order;
}

// rates[i][r]: worker count i's rate in round r -> one row per worker count.
std::vector<ScalingBenchmarkRow> summarize(const Config& config,
                                           const ScalingBenchmarkOptions& options,
                                           const std::vector<std::vector<double>>& rates,
                                           std::int64_t samples_per_phase) {
  std::vector<ScalingBenchmarkRow> rows;
  const std::vector<double>& base = rates.front();
  for (std::size_t i = 0; i < rates.size(); ++i) {
    std::vector<double> speedups;
    for (std::size_t r = 0; r < base.size(); ++r) {
      speedups.push_back(base[r] > 0.0 ? rates[i][r] / base[r] : 0.0);
    }
    ScalingBenchmarkRow row;
    row.strategy = config.parallel.strategy;
    row.workers = options.workers[i];
    row.rounds = options.rounds;
    row.samples_per_phase = samples_per_phase;
    row.rate = median(rates[i]);
    row.rate_min = *std::min_element(rates[i].begin(), rates[i].end());
    row.rate_max = *std::max_element(rates[i].begin(), rates[i].end());
    row.speedup = median(speedups);
    row.speedup_min = *std::min_element(speedups.begin(), speedups.end());
    row.speedup_max = *std::max_element(speedups.begin(), speedups.end());
    row.efficiency = row.speedup * static_cast<double>(options.workers.front()) /
                     static_cast<double>(row.workers);
    rows.push_back(row);
  }
  return rows;
}

// This rank's shares of successive epochs' shuffled orders, as a run visits them: the Trainer's
// own plan (data::GlobalBatchPlan) over data::ShuffledSampler's orders.
class BatchStream {
 public:
  BatchStream(std::int64_t samples, std::int64_t batch, std::uint64_t seed, int rank, int ranks)
      : sampler_(samples, seed), plan_(samples, batch, rank, ranks, 1) {}
  // The next step's share: positions of the epoch's order, and the batch it is a part of.
  std::pair<std::span<const std::int64_t>, std::int64_t> next_share() {
    std::optional<data::Share> share = order_.empty() ? std::nullopt : plan_.next();
    if (!share) {
      order_ = sampler_.epoch_order(epoch_);
      plan_.begin_epoch(epoch_++, 0);
      share = plan_.next();
    }
    return {std::span<const std::int64_t>(order_).subspan(static_cast<std::size_t>(share->begin),
                                                          static_cast<std::size_t>(share->size)),
            share->scale_to};
  }

 private:
  data::ShuffledSampler sampler_;
  data::GlobalBatchPlan plan_;
  std::vector<std::int64_t> order_;
  std::int64_t epoch_ = 0;
};

// One rank's part in one worker count: its Trainer (none when rank >= W) and its batches.
struct Participant {
  std::unique_ptr<comm::Communicator> sub;  // W ranks when 1 < W < max(workers)
  std::unique_ptr<Trainer> trainer;
  std::unique_ptr<BatchStream> batches;
  std::int64_t step = 0;
  tensor::Tensor x;
  std::vector<std::int32_t> y;
};

std::vector<ScalingBenchmarkRow> run_allreduce(const Config& config,
                                               const ScalingBenchmarkOptions& options,
                                               const std::function<void(int)>& on_round) {
  const auto data = std::make_shared<const RunData>(load_run_data(config.data));
  const std::int64_t batch = config.train.batch_size;
  if (data->train.size() < batch) {
    throw ConfigError(
        fmt::format("bench scaling: the training set has {} samples, fewer than one batch of {}",
                    data->train.size(), batch));
  }
  const int ranks = *std::max_element(options.workers.begin(), options.workers.end());
  const std::size_t counts = options.workers.size();
  std::vector<std::vector<double>> rates(
      counts, std::vector<double>(static_cast<std::size_t>(options.rounds)));
  std::vector<double> phase_seconds(static_cast<std::size_t>(ranks), 0.0);
  // The hierarchical allreduce's groups are the threads of a process: all the ranks here.
  comm::CommOptions world_options = comm_options(config);
  world_options.local_size = ranks;
  comm::spawn_ranks(
      ranks,
      [&](comm::Communicator& world) {
        const int rank = world.rank();
        ScopedComputePool pool(static_cast<int>(config.train.threads));
        std::vector<Participant> parts(counts);
        for (std::size_t i = 0; i < counts; ++i) {
          const int w = options.workers[i];
          Config c = config;
          c.parallel.workers = w;
          TrainerOptions trainer_options;
          trainer_options.quiet = true;
          trainer_options.data = data;
          if (w > 1 && w < ranks) {
            comm::CommOptions sub_options = world_options;
            sub_options.local_size = w;
            parts[i].sub = world.split(rank < w ? 0 : comm::kUndefinedColor, rank, sub_options);
          }
          if (rank >= w) continue;
          if (w > 1) trainer_options.comm = w == ranks ? &world : parts[i].sub.get();
          parts[i].trainer = std::make_unique<Trainer>(c, trainer_options);
          parts[i].batches = std::make_unique<BatchStream>(
              data->train.size(), batch, static_cast<std::uint64_t>(config.train.seed), rank, w);
        }
        // `steps` steps of worker count i on this rank (when it takes part): its seconds.
        auto phase = [&](std::size_t i, std::int64_t steps) {
          Participant& p = parts[i];
          if (!p.trainer) return 0.0;
          // What a run's step clock times: the gather and the step, not the epoch's shuffle.
          double seconds = 0.0;
          for (std::int64_t s = 0; s < steps; ++s) {
            const auto [share, scale_to] = p.batches->next_share();
            Stopwatch clock;
            data::gather_batch(data->train, share, p.x, p.y);
            p.trainer->train_step(p.x, p.y, p.step++, nullptr, scale_to);
            seconds += clock.seconds();
          }
          return seconds;
        };
        for (std::size_t i = 0; i < counts; ++i) {
          world.barrier();
          phase(i, options.warmup_steps);
        }
        for (int round = 0; round < options.rounds; ++round) {
          for (std::size_t i : round_order(counts, round)) {
            world.barrier();
            phase_seconds[static_cast<std::size_t>(rank)] = phase(i, options.steps);
            world.barrier();
            if (rank != 0) continue;
            const auto w = static_cast<std::size_t>(options.workers[i]);
            const double slowest =
                *std::max_element(phase_seconds.begin(), phase_seconds.begin() + w);
            rates[i][static_cast<std::size_t>(round)] =
                static_cast<double>(options.steps * batch) / std::max(slowest, 1e-12);
          }
          if (rank == 0 && on_round) on_round(round);
        }
        world.barrier();  // rank 0 has read every rank's seconds before any rank leaves
      },
      world_options, rank_pinning(config));
  return summarize(config, options, rates, options.steps * batch);
}

std::vector<ScalingBenchmarkRow> run_hogwild(const Config& config,
                                             const ScalingBenchmarkOptions& options,
                                             const std::function<void(int)>& on_round) {
  check_hogwild_config(config);
  const HogwildData data = load_hogwild_data(config);
  const optim::LrSchedule schedule = hogwild_epoch_schedule(config);
  std::vector<std::unique_ptr<HogwildEngine>> engines;
  for (int w : options.workers) {
    engines.push_back(std::make_unique<HogwildEngine>(config, data, w));
  }
  const std::size_t counts = engines.size();
  std::vector<std::vector<double>> rates(
      counts, std::vector<double>(static_cast<std::size_t>(options.rounds)));
  std::int64_t updates = 0;
  if (options.warmup_steps > 0) {
    for (auto& engine : engines) engine->run_epoch(0, static_cast<float>(schedule.lr(0)));
  }
  for (int round = 0; round < options.rounds; ++round) {
    const auto lr = static_cast<float>(schedule.lr(round));
    for (std::size_t i : round_order(counts, round)) {
      const parallel::HogwildEpoch epoch = engines[i]->run_epoch(round + 1, lr);
      rates[i][static_cast<std::size_t>(round)] = epoch.updates_per_second;
      updates = epoch.updates;
    }
    if (on_round) on_round(round);
  }
  return summarize(config, options, rates, updates);
}

}  // namespace

std::vector<ScalingBenchmarkRow> run_scaling_benchmark(const Config& config,
                                                       const ScalingBenchmarkOptions& options,
                                                       const std::function<void(int)>& on_round) {
  check_scaling_benchmark(config, options);
  validate(config);
  return config.parallel.strategy == "hogwild" ? run_hogwild(config, options, on_round)
                                               : run_allreduce(config, options, on_round);
}

}  // namespace dtrain::experiments
