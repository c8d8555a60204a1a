#include "dtrain/train/strategy_registry.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/parallel/process_grid.h"
#include "dtrain/train/strategies/data_parallel/data_parallel_strategy.h"
#include "dtrain/train/strategies/decentralized/decentralized_sgd.h"
#include "dtrain/train/strategies/federated/federated_run.h"
#include "dtrain/train/strategies/hogwild/hogwild_run.h"
#include "dtrain/train/strategies/hybrid/hybrid_strategy.h"
#include "dtrain/train/strategies/local_sgd/local_sgd.h"
#include "dtrain/train/strategies/parameter_server/ps_run.h"
#include "dtrain/train/strategies/pipeline/pipeline_strategy.h"
#include "dtrain/train/strategies/single_worker.h"
#include "dtrain/train/strategies/spatial/spatial_strategy.h"
#include "dtrain/train/strategies/tensor_parallel/tensor_parallel_strategy.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

namespace {

// One worker (no communicator) needs no strategy that talks to other ranks.
template <typename Parallel>
std::unique_ptr<Strategy> replicas(const StrategyContext& context) {
  if (context.comm == nullptr) return std::make_unique<SingleWorker>(context);
  return std::make_unique<Parallel>(context);
}

int hybrid_thread_ranks(const Config& config) {
  const HybridSection& h = config.hybrid;
  const std::int64_t grid = h.dp * h.tp * h.pp * h.sp;
  if (config.parallel.workers != 1 && config.parallel.workers != grid) {
    throw ConfigError(fmt::format(
        "parallel.workers = {} but the grid {}: the grid sets the number of ranks; drop --workers "
        "or make it {}",
        config.parallel.workers, parallel::grid_product_text(h.dp, h.sp, h.tp, h.pp, "hybrid."),
        grid));
  }
  return static_cast<int>(grid);
}

std::vector<StrategyInfo> make_registry() {
  std::vector<StrategyInfo> registry;
  registry.push_back(StrategyInfo{
      "data_parallel",
      "synchronous data parallelism, gradients averaged by an allreduce every step (buckets, "
      "overlap, ZeRO-1)",
      "docs/PARALLEL.md", replicas<DataParallel>, nullptr, nullptr, nullptr,
      /*pin_ranks=*/true, /*takes_model_factory=*/true});
  registry.push_back(StrategyInfo{
      "parameter_server",
      "parameter servers: workers push gradients and pull parameters (bsp, async, ssp, backup "
      "workers)",
      "docs/PS.md", nullptr, ps_thread_ranks,
      [](comm::Communicator& comm, const Config& config, const TrainerOptions& options,
         const std::shared_ptr<const RunData>& data) {
        return run_ps_rank(comm, config, options, data);
      },
      nullptr,
      /*pin_ranks=*/false});
  registry.push_back(StrategyInfo{"hogwild",
                                  "lock-free threads updating one parameter vector (Hogwild!)",
                                  "docs/HOGWILD.md", nullptr, nullptr, nullptr, run_hogwild,
                                  /*pin_ranks=*/false});
  registry.push_back(StrategyInfo{
      "local_sgd",
      "each rank takes local_sgd.period steps alone, then the replicas average their parameters "
      "(local SGD)",
      "docs/LOCAL_SGD.md", replicas<LocalSgd>, nullptr, nullptr, nullptr,
      /*pin_ranks=*/true, /*takes_model_factory=*/true});
  // run_rank only hands the strategy the run's test set (each replica's accuracy at the end); a
  // Trainer built with `make` trains the same without that list.
  registry.push_back(StrategyInfo{
      "decentralized",
      "each rank keeps its own replica and, every step, averages it with its neighbours in "
      "decentralized.topology (D-PSGD)",
      "docs/DECENTRALIZED.md", replicas<DecentralizedSgd>, nullptr, run_decentralized_rank, nullptr,
      /*pin_ranks=*/true, /*takes_model_factory=*/true});
  registry.push_back(
      StrategyInfo{"pipeline",
                   "pipeline parallelism: the layers cut into one stage per rank, each batch in "
                   "pipeline.micro_batches micro-batches (GPipe, 1F1B)",
                   "docs/PIPELINE.md", replicas<Pipeline>, nullptr, nullptr, nullptr,
                   /*pin_ranks=*/true, /*takes_model_factory=*/true});
  // run_rank: a federated run is rounds of simulated clients on each rank, not one Trainer.
  registry.push_back(StrategyInfo{
      "federated",
      "federated averaging: each round a fraction of federated.clients simulated clients trains "
      "local epochs from the global model, which becomes their sample-weighted average (FedAvg, "
      "FedProx)",
      "docs/FEDERATED.md", nullptr, nullptr, run_federated_rank, nullptr, /*pin_ranks=*/true,
      /*takes_model_factory=*/false});
  registry.push_back(StrategyInfo{
      "tensor_parallel",
      "tensor (operator) parallelism: each GPT block's attention split by heads and its MLP by "
      "hidden units over the ranks (Megatron-LM column/row-parallel Linear); the MLP's layers "
      "by outputs (seed 003's all-gather form)",
      "docs/TENSOR_PARALLEL.md", replicas<TensorParallel>, nullptr, nullptr, nullptr,
      /*pin_ranks=*/true});
  // thread_ranks: the grid sets the ranks (dp x sp x tp x pp); parallel.workers, when set, must
  // agree.
  registry.push_back(StrategyInfo{
      "hybrid",
      "a process grid hybrid.dp x hybrid.sp x hybrid.tp x hybrid.pp (--dp, --sp, --tp, --pp): "
      "data parallelism around pipeline, tensor or spatial parallelism, each stage's or shard's "
      "gradients summed over its data group (ZeRO-1 with data_parallel.zero_stage = 1)",
      "docs/HYBRID.md", replicas<Hybrid>, hybrid_thread_ranks, nullptr, nullptr,
      /*pin_ranks=*/true});
  registry.push_back(StrategyInfo{
      "spatial",
      "spatial parallelism: every image's rows split over the ranks through the convolutional "
      "layers, boundary rows traded with the neighbour ranks (halo exchange), the bands gathered "
      "before the fully connected head",
      "docs/SPATIAL.md", replicas<Spatial>, nullptr, nullptr, nullptr,
      /*pin_ranks=*/true, /*takes_model_factory=*/true});
  return registry;
}

}  // namespace

const std::vector<StrategyInfo>& strategy_registry() {
  static const std::vector<StrategyInfo> registry = make_registry();
  return registry;
}

const StrategyInfo* find_strategy_or_null(std::string_view name) {
  for (const StrategyInfo& info : strategy_registry()) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

void check_takes_model_factory(const StrategyInfo& info) {
  if (info.takes_model_factory) return;
  std::string accepted;
  for (const StrategyInfo& other : strategy_registry()) {
    if (!other.takes_model_factory) continue;
    if (!accepted.empty()) accepted += ", ";
    accepted += other.name;
  }
  throw ConfigError(
      fmt::format("parallel.strategy = \"{}\" builds its model from model.name, not from "
                  "TrainerOptions::make_model; train a model built in code with one of: {}",
                  info.name, accepted));
}

const StrategyInfo& find_strategy(std::string_view name) {
  if (const StrategyInfo* info = find_strategy_or_null(name)) return *info;
  throw ConfigError(fmt::format("parallel.strategy = \"{}\" is not a strategy; accepted: {}", name,
                                strategy_names()));
}

std::string strategy_names() {
  std::string names;
  for (const StrategyInfo& info : strategy_registry()) {
    if (!names.empty()) names += ", ";
    names += info.name;
  }
  return names;
}

}  // namespace dtrain::train
