#include "dtrain/train/strategies/decentralized/decentralized_sgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <string_view>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/nn/loss.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/train/strategies/per_rank_state.h"
#include "dtrain/train/strategies/single_worker.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

namespace {

using Clock = TraceRecorder::Clock;

// Checkpoint tensors that are not optimizer state: each rank's replica.
constexpr std::string_view kParams = "params";
constexpr std::string_view kBuffers = "buffers";

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Evaluation batch, as the Trainer's.
constexpr std::int64_t kEvalBatch = 1000;

}  // namespace

comm::Topology DecentralizedSgd::topology_for(const Config& config, int ranks) {
  const std::string& name = config.decentralized.topology;
  try {
    return comm::Topology(comm::parse_topology(name), ranks);
  } catch (const ConfigError& e) {
    throw ConfigError(
        fmt::format("config key 'decentralized.topology' = \"{}\": {}", name, e.what()));
  }
}

double DecentralizedSgd::ring_allreduce_bytes(std::int64_t values, int ranks) {
  return 2.0 * (ranks - 1) / ranks * 4.0 * static_cast<double>(values);
}

DecentralizedSgd::DecentralizedSgd(const StrategyContext& context, const data::Dataset* test)
    : Strategy(context),
      comm_(required_communicator(context, "decentralized SGD")),
      // Before any collective: a topology that does not exist fails on every rank alike.
      topology_(topology_for(context.config, context.world)),
      test_(test) {
  for (int t = 0; t < topology_.period(); ++t) {
    out_degree_.push_back(static_cast<int>(topology_.out_neighbors(context.rank, t).size()));
  }
  parallel::broadcast_parameters(comm_, context.model.store());
  gossip_bytes_start_ = static_cast<double>(comm_.stats().get("neighbor_allreduce").bytes_sent);
  const auto& settings = context.config.decentralized;
  const compress::CodecSpec spec = compress::parse_codec(settings.compression);
  if (spec.kind != compress::CodecKind::kNone || settings.consensus_step > 0.0) {
    const nn::ParamStore& store = context.model.store();
    choco_ = std::make_unique<ChocoGossip>(
        comm_, topology_, spec,
        settings.consensus_step > 0.0 ? settings.consensus_step
                                      : ChocoGossip::default_gamma(spec, store.num_params()),
        store.params(), store.num_params(), static_cast<std::uint64_t>(context.config.train.seed));
  }
}

double DecentralizedSgd::model_bytes() const {
  const nn::ParamStore& store = context_.model.store();
  if (choco_) {
    return static_cast<double>(choco_->payload_bytes()) +
           4.0 * static_cast<double>(store.num_buffer_elements());
  }
  return 4.0 * static_cast<double>(store.num_params() + store.num_buffer_elements());
}

double DecentralizedSgd::bytes_sent() const {
  double bytes = 0.0;
  for (const auto& [op, stats] : comm_.stats().snapshot()) {
    bytes += static_cast<double>(stats.bytes_sent);
  }
  return bytes;
}

StepResult DecentralizedSgd::step(const StepInput& input, optim::Optimizer& optimizer) {
  restore_replica();  // after a checkpoint the store held the average
  const auto& settings = context_.config.decentralized;
  nn::ParamStore& store = context_.model.store();
  if (choco_reset_) {
    choco_->reset(store.params());
    choco_reset_ = false;
  }
  const std::int64_t n = store.num_params();
  const bool global =
      settings.global_average_every > 0 && (input.step + 1) % settings.global_average_every == 0;
  // The gossip's arguments are equal on every rank by construction (decentralized_sgd.h).
  comm::CollectiveOptions gossip_options;
  gossip_options.check_header = false;
  // The share's gradient as a 1/P part of the global batch (decentralized_sgd.h).
  const double scale_to =
      static_cast<double>(input.global_count) / static_cast<double>(context_.world);
  StepResult result;
  const auto gossip_start = Clock::now();
  if (settings.overlap && !global) {
    // Lian et al.: W X on the communicator's thread while forward and backward read X.
    mixed_.resize(static_cast<std::size_t>(n));
    comm::Work work = comm_.neighbor_allreduce_async(store.params(), mixed_.data(), n, DType::kF32,
                                                     topology_, input.step, gossip_options);
    LocalGradients::Result local;
    try {
      local = context_.local.compute(input.x, input.labels, input.step, scale_to);
    } catch (...) {
      // The gossip reads the parameters and writes mixed_: let it end before they can go away
      // (its own error, if any, is the consequence of this one).
      try {
        work.wait(comm_.options().timeout);
      } catch (...) {
      }
      throw;
    }
    const auto wait_start = Clock::now();
    work.wait(comm_.options().timeout);
    result.waiting = seconds_since(wait_start);
    result.comm = std::chrono::duration<double>(work.finished_at() - gossip_start).count();
    std::copy(mixed_.begin(), mixed_.end(), store.params());
    const auto update_start = Clock::now();
    optimizer.step(store.params(), store.grads(), input.lr);
    if (context_.trace.enabled()) {
      context_.trace.add("neighbor allreduce (overlapped)", "comm", TraceRecorder::kCommThread,
                         gossip_start, work.finished_at(),
                         fmt::format(R"({{"step":{},"bytes":{}}})", input.step,
                                     out_degree_[input.step % topology_.period()] * n * 4));
      context_.trace.add("optimizer (local)", "compute", TraceRecorder::kComputeThread,
                         update_start, Clock::now(), fmt::format(R"({{"step":{}}})", input.step));
    }
    result.loss = local.mean_loss();
    result.correct = local.correct;
    const auto buffers_start = Clock::now();
    gossip_buffers(input.step);
    const double buffers = seconds_since(buffers_start);
    result.comm += buffers;
    result.waiting += buffers;
  } else {
    result = step_alone(context_, input, optimizer, scale_to, "optimizer (local)");
    const auto start = Clock::now();
    if (global) {
      const double sent_before = bytes_sent();
      global_mean();
      global_average_bytes_sent_ += bytes_sent() - sent_before;
      ++global_averages_;
    } else if (choco_) {
      choco_->step(store.params(), input.step);
      gossip_buffers(input.step);
    } else {
      comm_.neighbor_allreduce(store.params(), store.params(), n, DType::kF32, topology_,
                               input.step, gossip_options);
      gossip_buffers(input.step);
    }
    result.comm = seconds_since(start);
    result.waiting = result.comm;
    if (context_.trace.enabled()) {
      context_.trace.add(global ? "global average" : "neighbor allreduce", "comm",
                         TraceRecorder::kComputeThread, start, Clock::now(),
                         fmt::format(R"({{"step":{}}})", input.step));
    }
  }
  if (!global) {
    ++gossip_steps_;
    gossip_bytes_predicted_ +=
        static_cast<double>(
            out_degree_[static_cast<std::size_t>(input.step % topology_.period())]) *
        model_bytes();
  }
  steps_done_ = input.step + 1;
  return result;
}

void DecentralizedSgd::gossip_buffers(std::int64_t step) {
  nn::ParamStore& store = context_.model.store();
  if (store.num_buffer_elements() == 0) return;
  comm::CollectiveOptions options;
  options.check_header = false;
  comm_.neighbor_allreduce(store.buffers(), store.buffers(), store.num_buffer_elements(),
                           DType::kF32, topology_, step, options);
}

void DecentralizedSgd::global_mean() {
  nn::ParamStore& store = context_.model.store();
  const auto ranks = static_cast<float>(context_.world);
  comm::CollectiveOptions options;
  options.check_header = context_.config.parallel.check_headers;
  auto mean = [&](float* values, std::int64_t count) {
    if (count == 0) return;
    comm_.allreduce(values, count, DType::kF32, comm::ReduceOp::kSum, options);
    for (std::int64_t i = 0; i < count; ++i) values[i] /= ranks;
  };
  mean(store.params(), store.num_params());
  mean(store.buffers(), store.num_buffer_elements());
}

void DecentralizedSgd::save_replica() {
  if (replica_saved_) return;
  const nn::ParamStore& store = context_.model.store();
  saved_params_.assign(store.params(), store.params() + store.num_params());
  saved_buffers_.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
  replica_saved_ = true;
}

void DecentralizedSgd::restore_replica() {
  if (!replica_saved_) return;
  nn::ParamStore& store = context_.model.store();
  std::copy(saved_params_.begin(), saved_params_.end(), store.params());
  std::copy(saved_buffers_.begin(), saved_buffers_.end(), store.buffers());
  replica_saved_ = false;
}

double DecentralizedSgd::average_into_store() {
  save_replica();
  nn::ParamStore& store = context_.model.store();
  if (average_at_ == steps_done_) {
    // No step since the last average (the epoch's evaluation, then its checkpoint, then the end
    // of the run): the same replicas, so the same average, without another allreduce.
    std::copy(average_params_.begin(), average_params_.end(), store.params());
    std::copy(average_buffers_.begin(), average_buffers_.end(), store.buffers());
    return average_consensus_;
  }
  global_mean();
  // mean_r ||x_r - x_bar||^2: each rank's squared distance, summed over the ranks (8 bytes).
  double distance = 0.0;
  for (std::int64_t i = 0; i < store.num_params(); ++i) {
    const double d = static_cast<double>(saved_params_[static_cast<std::size_t>(i)]) -
                     static_cast<double>(store.params()[i]);
    distance += d * d;
  }
  comm_.allreduce(&distance, 1, DType::kF64, comm::ReduceOp::kSum);
  average_params_.assign(store.params(), store.params() + store.num_params());
  average_buffers_.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
  average_at_ = steps_done_;
  average_consensus_ = distance / static_cast<double>(context_.world);
  return average_consensus_;
}

void DecentralizedSgd::before_evaluation() {
  consensus_.emplace_back(steps_done_, average_into_store());
}

void DecentralizedSgd::after_evaluation() { restore_replica(); }

double DecentralizedSgd::evaluate_alone() {
  const data::Dataset& test = *test_;
  const std::int64_t n = test.size();
  if (n == 0) return 0.0;
  const std::int64_t per_sample = test.labels_per_sample;
  const std::int64_t batch = std::max<std::int64_t>(1, kEvalBatch / per_sample);
  std::vector<std::int64_t> indices(static_cast<std::size_t>(batch));
  tensor::Tensor x;
  std::vector<std::int32_t> y;
  std::int64_t correct = 0;
  for (std::int64_t begin = 0; begin < n; begin += batch) {
    const std::int64_t count = std::min(batch, n - begin);
    std::iota(indices.begin(), indices.begin() + count, begin);
    data::gather_batch(test, std::span(indices).first(static_cast<std::size_t>(count)), x, y);
    const tensor::Tensor& logits = context_.model.forward(
        x, nn::ForwardContext{nn::Mode::kEval,
                              static_cast<std::uint64_t>(context_.config.train.seed), 0});
    correct += nn::count_correct(logits, y);
  }
  return static_cast<double>(correct) / static_cast<double>(n * per_sample);
}

void DecentralizedSgd::finish(bool writer) {
  (void)writer;
  // The last checkpoint left the average in the store: each rank's replica first.
  restore_replica();
  if (test_ != nullptr) replica_accuracy_ = evaluate_alone();
  // The run ends holding the average on every rank: the model evaluation measured.
  final_consensus_ = average_into_store();
  replica_saved_ = false;
}

std::vector<optim::StateTensor> DecentralizedSgd::checkpoint_state(
    const optim::Optimizer& optimizer) {
  restore_replica();
  const nn::ParamStore& store = context_.model.store();
  std::vector<optim::StateTensor> mine = optimizer.state();
  mine.push_back({std::string(kParams),
                  std::vector<float>(store.params(), store.params() + store.num_params())});
  mine.push_back(
      {std::string(kBuffers),
       std::vector<float>(store.buffers(), store.buffers() + store.num_buffer_elements())});
  // Gathered at rank 0, which alone writes the file (the other ranks return nothing).
  std::vector<optim::StateTensor> all = gather_per_rank(comm_, mine, /*root_only=*/true);
  // The checkpoint's model (written from the store after this returns) is the average; this
  // rank's replica comes back before its next step (or at finish()).
  average_into_store();
  return all;
}

void DecentralizedSgd::restore_state(std::vector<optim::StateTensor> state,
                                     std::int64_t optimizer_steps, optim::Optimizer& optimizer,
                                     const std::string& path) {
  const std::string prefix = rank_prefix(context_.rank);
  PerRankState split = split_per_rank(state, context_.rank);
  const optim::StateTensor* params = nullptr;
  const optim::StateTensor* buffers = nullptr;
  if (split.writers == 0) {
    // A checkpoint of synchronous training: every replica starts from its model and state.
    Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
    return;
  }
  check_per_rank_writers(split, context_.world, path, "the replicas",
                         "parameters and optimizer state are");
  std::vector<optim::StateTensor> optimizer_state;
  for (optim::StateTensor& tensor : split.mine) {
    if (tensor.name == kParams) {
      params = &tensor;
    } else if (tensor.name == kBuffers) {
      buffers = &tensor;
    } else {
      optimizer_state.push_back(std::move(tensor));
    }
  }
  nn::ParamStore& store = context_.model.store();
  // Without them (a local SGD checkpoint) every replica starts from the checkpoint's model.
  for (const auto& [tensor, target, count] :
       {std::tuple{params, store.params(), store.num_params()},
        std::tuple{buffers, store.buffers(), store.num_buffer_elements()}}) {
    if (tensor == nullptr) continue;
    if (std::ssize(tensor->values) != count) {
      throw CheckpointError(fmt::format("checkpoint {}: {}{} holds {} values and the model has {}",
                                        path, prefix, tensor->name, tensor->values.size(), count));
    }
    std::copy(tensor->values.begin(), tensor->values.end(), target);
  }
  // CHOCO's public copies: rebuilt from the restored replicas before the next step.
  if (choco_) choco_reset_ = true;
  Strategy::restore_state(std::move(optimizer_state), optimizer_steps, optimizer, path);
}

std::vector<std::string> DecentralizedSgd::describe() const {
  const auto& settings = context_.config.decentralized;
  const nn::ParamStore& store = context_.model.store();
  const double bytes = model_bytes();
  const double mean_degree =
      static_cast<double>(std::accumulate(out_degree_.begin(), out_degree_.end(), 0)) /
      static_cast<double>(out_degree_.size());
  std::string grid;
  if (topology_.rows() > 0) grid = fmt::format(" {} x {}", topology_.rows(), topology_.cols());
  std::vector<std::string> lines = {
      fmt::format("decentralized SGD: {} ranks, topology {}{} ({} out-neighbour(s) per step{}), "
                  "{}; evaluation measures the replicas' average",
                  context_.world, topology_.name(), grid, mean_degree,
                  topology_.time_varying() ? fmt::format(", period {}", topology_.period()) : "",
                  settings.overlap
                      ? "gossip of the pre-step parameters overlapped with forward and backward "
                        "(Lian et al.)"
                      : "local step, then gossip"),
      fmt::format(
          "gossip: out-neighbours x {} = {:.0f} bytes sent per rank and step; ring "
          "allreduce of the gradients: 2 (P-1)/P x 4N = {:.0f} ({:.3f}x); global average "
          "{}",
          choco_ ? std::string("(payload + 4B)") : std::string("4(N + B)"), mean_degree * bytes,
          ring_allreduce_bytes(store.num_params(), context_.world),
          mean_degree * bytes /
              std::max(ring_allreduce_bytes(store.num_params(), context_.world), 1.0),
          settings.global_average_every > 0
              ? fmt::format("every {} steps (2 (P-1)/P x 4(N + B) each, by {} allreduce)",
                            settings.global_average_every, comm_.options().allreduce_algorithm)
              : std::string("never"))};
  if (choco_) {
    lines.push_back(
        fmt::format("compressed gossip (CHOCO-SGD): each rank sends C(x - x_hat) through {} to its "
                    "out-neighbours, {} bytes each, consensus step gamma = {}; buffers exactly",
                    choco_->codec_text(), choco_->payload_bytes(), choco_->gamma()));
  }
  return lines;
}

nlohmann::json DecentralizedSgd::summary(const RunTotalsView& totals) {
  const auto& settings = context_.config.decentralized;
  nlohmann::json ranks = totals.per_rank_rows();
  double sent = 0.0;
  for (const auto& row : ranks) sent += row["bytes_sent"].get<double>();
  // Summed over the ranks (collective: every rank calls summary()): the gossip measured by the
  // neighbour allreduce counter, its formula, the global averages.
  // CHOCO's payloads go point to point (the "send" counter around its exchanges); a resume's
  // reset adds one exact neighbour allreduce.
  double sums[3] = {static_cast<double>(comm_.stats().get("neighbor_allreduce").bytes_sent) -
                        gossip_bytes_start_ + (choco_ ? choco_->bytes_sent() : 0.0),
                    gossip_bytes_predicted_, global_average_bytes_sent_};
  comm_.allreduce(sums, 3, DType::kF64, comm::ReduceOp::kSum);
  // Each replica's test accuracy, by rank (-1 where the rank had no test set).
  double accuracy = replica_accuracy_.value_or(-1.0);
  std::vector<double> accuracies(static_cast<std::size_t>(context_.world));
  comm_.allgather(&accuracy, accuracies.data(), 1, DType::kF64);
  nlohmann::json replica_accuracy = nlohmann::json::array();
  for (double a : accuracies)
    replica_accuracy.push_back(a < 0.0 ? nlohmann::json() : nlohmann::json(a));
  const double p = static_cast<double>(context_.world);
  const double steps = static_cast<double>(std::max<std::int64_t>(totals.steps, 1));
  const std::int64_t n = context_.model.store().num_params();
  const double ring = ring_allreduce_bytes(n, context_.world);
  const double gossip = sums[0] / steps / p;
  nlohmann::json consensus = nlohmann::json::array();
  for (const auto& [step, distance] : consensus_) {
    consensus.push_back({{"step", step}, {"distance", distance}});
  }
  nlohmann::json out = {
      {"strategy", name()},
      {"ranks", context_.world},
      {"transport", std::string(comm_.transport().name())},
      {"topology", std::string(topology_.name())},
      {"overlap", settings.overlap},
      {"global_average_every", settings.global_average_every},
      {"gossip_steps", gossip_steps_},
      {"global_averages", global_averages_},
      // Every collective of the run (gossip, global averages, evaluation, checkpoints).
      {"bytes_sent", sent},
      {"bytes_sent_per_rank_and_step", sent / steps / p},
      // The gossip alone, measured by the communicator's counter, beside its formula.
      {"gossip_bytes_sent_per_rank_and_step", gossip},
      {"gossip_bytes_sent_per_rank_and_step_predicted", sums[1] / steps / p},
      {"gossip_bytes_formula",
       choco_ ? fmt::format("out-neighbours x ({} B {} payload + 4B) per gossip step",
                            choco_->payload_bytes(), choco_->codec_text())
              : std::string("out-neighbours x 4(N + B) per gossip step")},
      {"compression", choco_ ? choco_->codec_text() : std::string("none")},
      {"consensus_step", choco_ ? nlohmann::json(choco_->gamma()) : nlohmann::json()},
      {"global_average_bytes_sent_per_rank_and_step", sums[2] / steps / p},
      {"global_average_bytes_sent_per_rank_and_step_predicted",
       ring_allreduce_bytes(n + context_.model.store().num_buffer_elements(), context_.world) *
           static_cast<double>(global_averages_) / steps},
      // What synchronous data parallelism's ring allreduce of the gradients sends per step.
      {"ring_allreduce_bytes_per_rank_and_step", ring},
      {"gossip_to_ring_allreduce", gossip / std::max(ring, 1.0)},
      // mean_r ||x_r - x_bar||^2 over the parameters, at each evaluation and at the end.
      {"consensus_distance", consensus},
      {"final_consensus_distance",
       final_consensus_ ? nlohmann::json(*final_consensus_) : nlohmann::json()},
      {"evaluated_model", "the replicas' average"},
      {"replica_test_accuracy", replica_accuracy},
      {"per_rank", ranks}};
  if (topology_.rows() > 0) out["torus"] = {topology_.rows(), topology_.cols()};
  return out;
}

std::optional<RunSummary> run_decentralized_rank(comm::Communicator& comm, const Config& config,
                                                 const TrainerOptions& options,
                                                 const std::shared_ptr<const RunData>& data) {
  // Before the Trainer (whose construction is collective): every rank fails alike.
  DecentralizedSgd::topology_for(config, comm.size());
  TrainerOptions rank_options = options;
  rank_options.comm = &comm;
  rank_options.data = data;
  rank_options.make_strategy = [data](const StrategyContext& context) {
    return std::unique_ptr<Strategy>(std::make_unique<DecentralizedSgd>(context, &data->test));
  };
  Trainer trainer(config, rank_options);
  return trainer.run();
}

}  // namespace dtrain::train
