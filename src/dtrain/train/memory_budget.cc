#include "dtrain/train/memory_budget.h"

#include <fmt/format.h>

#include <limits>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/transport/mpi/world.h"
#include "dtrain/nn/parameter_count.h"
#include "dtrain/train/strategies/data_parallel/zero_policy.h"

namespace dtrain::train {
namespace {

constexpr std::int64_t kSaturated = std::numeric_limits<std::int64_t>::max();

std::int64_t mul(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? kSaturated : out;
}
std::int64_t add(std::int64_t a, std::int64_t b) {
  std::int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? kSaturated : out;
}

constexpr std::int64_t kFloat = 4;

}  // namespace

int optimizer_state_copies(const std::string& optimizer, double momentum) {
  if (optimizer == "adam" || optimizer == "adamw") return 2;
  return momentum > 0.0 ? 1 : 0;  // sgd, lars: the velocity
}

MemoryParts memory_parts(const MemoryNeed& need) {
  MemoryParts parts;
  const std::int64_t replicas = need.replicas < 1 ? 1 : need.replicas;
  const std::int64_t shards = need.optimizer_shards < 1 ? 1 : need.optimizer_shards;
  parts.parameters = mul(mul(need.parameters, kFloat), replicas);
  parts.gradients = parts.parameters;
  parts.buffers = mul(mul(need.buffers, kFloat), replicas);
  // A shard holds ceil(P / shards) elements of each state vector.
  const std::int64_t shard = need.parameters / shards + (need.parameters % shards != 0 ? 1 : 0);
  parts.optimizer = mul(mul(mul(shard, kFloat), need.optimizer_copies), replicas);
  if (!need.gradients) parts.gradients = 0;
  // One checkpoint: one replica's parameters, buffers and whole optimizer state.
  const std::int64_t checkpoint = add(add(mul(need.parameters, kFloat), mul(need.buffers, kFloat)),
                                      mul(mul(need.parameters, kFloat), need.optimizer_copies));
  parts.checkpoint = mul(checkpoint, need.checkpoint_copies);
  parts.total =
      add(add(add(parts.parameters, parts.gradients), add(parts.buffers, parts.optimizer)),
          parts.checkpoint);
  return parts;
}

bool this_process_writes_checkpoints() {
  return !comm::launched_by_mpirun() || comm::launcher_rank() == 0;
}

int checkpoint_copies(const Config& config) {
  return config.train.memory_checkpoint_every_steps > 0 ? 4 : 2;
}

std::optional<std::string> memory_shortfall(const MemoryNeed& need,
                                            const AvailableMemory& available) {
  if (!available.known) return std::nullopt;
  const MemoryParts parts = memory_parts(need);
  if (parts.total <= available.bytes) return std::nullopt;
  std::string optimizer = fmt::format(
      "optimizer state {} ({}, {} cop{} of the parameters", format_bytes(parts.optimizer),
      need.optimizer, need.optimizer_copies, need.optimizer_copies == 1 ? "y" : "ies");
  optimizer += need.optimizer_shards > 1
                   ? fmt::format(", ZeRO-1 sharded over {} ranks)", need.optimizer_shards)
                   : ")";
  std::string checkpoint;
  if (need.checkpoint_copies > 0) {
    checkpoint = fmt::format(
        " + checkpoint copies {} ({} x {}: the snapshot and its encoded bytes while a checkpoint "
        "is "
        "written{})",
        format_bytes(parts.checkpoint), need.checkpoint_copies,
        format_bytes(parts.checkpoint / need.checkpoint_copies),
        need.memory_tier ? ", and the memory tier's 2 slots" : "");
  }
  std::vector<std::string> advice;
  if (need.replicas > 1) {
    advice.push_back(fmt::format("fewer workers in this process (now {})", need.replicas));
  }
  advice.emplace_back(need.gradients
                          ? "a smaller model (model.hidden, model.d_model, model.layers, ...)"
                          : "fewer features (renumber them densely, or hash them into fewer)");
  if (need.memory_tier) advice.emplace_back("train.memory_checkpoint_every_steps = 0");
  if (need.optimizer_copies > 0 && need.optimizer_shards <= 1) {
    advice.emplace_back(need.world > 1 ? "--zero-stage 1 to shard the optimizer state"
                                       : "an optimizer with less state (sgd without momentum)");
  }
  advice.emplace_back("a machine with more memory");
  std::string what_to_do;
  for (std::size_t i = 0; i < advice.size(); ++i) {
    what_to_do += (i == 0 ? "" : i + 1 == advice.size() ? " or " : ", ") + advice[i];
  }
  return fmt::format(
      "the model does not fit in memory: {} parameters x {} replica{} in this process need "
      "parameters {}{} + buffers {} + {}{} = {}, but {} {} available ({}; the data "
      "already loaded, {}, is counted there as used); use {}",
      need.parameters, need.replicas, need.replicas == 1 ? "" : "s", format_bytes(parts.parameters),
      need.gradients ? fmt::format(" + gradients {}", format_bytes(parts.gradients))
                     : std::string(),
      format_bytes(parts.buffers), optimizer, checkpoint, format_bytes(parts.total),
      format_bytes(available.bytes), available.bytes == 1 ? "is" : "are", available.source,
      format_bytes(need.data_bytes), what_to_do);
}

std::int64_t run_data_bytes(const RunData& data) {
  std::int64_t bytes = 0;
  for (const data::Dataset* set : {&data.train, &data.test}) {
    bytes = add(bytes, mul(set->images.numel(), kFloat));
    bytes = add(bytes, mul(static_cast<std::int64_t>(set->labels.size()), 4));
  }
  return bytes;
}

std::optional<MemoryNeed> estimate_memory_need(const Config& config, const nn::ModelSpec& spec,
                                               int replicas, int world, std::int64_t data_bytes,
                                               bool writes_checkpoints) {
  const std::optional<nn::ModelSize> size = nn::count_model_size(spec);
  if (!size) return std::nullopt;
  MemoryNeed need;
  need.parameters = size->parameters;
  need.buffers = size->buffers;
  need.optimizer = config.optim.name;
  need.optimizer_copies = optimizer_state_copies(config.optim.name, config.optim.momentum);
  need.replicas = replicas;
  need.world = world;
  need.data_bytes = data_bytes;
  if (writes_checkpoints) {
    need.checkpoint_copies = checkpoint_copies(config);
    need.memory_tier = config.train.memory_checkpoint_every_steps > 0;
  }
  if (config.parallel.strategy == "data_parallel" && world > 1) {
    const ZeroDecision zero =
        decide_zero_stage(config.data_parallel.zero_stage, world, config.optim.name,
                          config.parallel.allreduce, config.data_parallel.compression);
    if (zero.shard) need.optimizer_shards = world;
  }
  return need;
}

std::optional<MemoryNeed> check_memory_budget(const Config& config, const nn::ModelSpec& spec,
                                              int replicas, int world, std::int64_t data_bytes,
                                              bool writes_checkpoints) {
  std::optional<MemoryNeed> need =
      estimate_memory_need(config, spec, replicas, world, data_bytes, writes_checkpoints);
  if (need) check_memory_need(*need);
  return need;
}

void check_memory_need(const MemoryNeed& need) {
  if (auto message = memory_shortfall(need, available_memory())) throw ConfigError(*message);
}

}  // namespace dtrain::train
