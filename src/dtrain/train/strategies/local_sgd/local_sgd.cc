#include "dtrain/train/strategies/local_sgd/local_sgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string_view>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/train/strategies/per_rank_state.h"
#include "dtrain/train/strategies/single_worker.h"

namespace dtrain::train {

namespace {

// Checkpoint tensors of the compressed averages (per rank), beside the optimizer's.
constexpr std::string_view kResidual = "compression/residual";
constexpr std::string_view kAverages = "compression/averages";

}  // namespace

LocalSgd::LocalSgd(const StrategyContext& context)
    : Strategy(context), comm_(required_communicator(context, "local SGD")) {
  parallel::broadcast_parameters(comm_, context.model.store());
  const compress::CodecSpec spec = compress::parse_codec(context.config.local_sgd.compression);
  if (spec.kind != compress::CodecKind::kNone) {
    const nn::ParamStore& store = context.model.store();
    compressed_.emplace(comm_, spec, store.num_params(),
                        static_cast<std::uint64_t>(context.config.train.seed));
    last_average_.assign(store.params(), store.params() + store.num_params());
    delta_.resize(last_average_.size());
  }
}

double LocalSgd::average_bytes(std::int64_t parameters, int ranks) {
  return 2.0 * (ranks - 1) / ranks * 4.0 * static_cast<double>(parameters);
}

StepResult LocalSgd::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  // The share's gradient as a 1/P part of the global batch (local_sgd.h).
  const double scale_to =
      static_cast<double>(input.global_count) / static_cast<double>(context_.world);
  StepResult result = step_alone(context_, input, optimizer, scale_to, "optimizer (local)");
  ++local_steps_;
  const auto& settings = context_.config.local_sgd;
  const std::int64_t period = input.step < settings.synchronous_steps ? 1 : settings.period;
  if (local_steps_ >= period) {
    const auto start = Clock::now();
    result.comm = average();
    result.waiting = result.comm;
    if (context_.trace.enabled()) {
      context_.trace.add("average parameters", "comm", TraceRecorder::kComputeThread, start,
                         Clock::now(),
                         fmt::format(R"({{"step":{},"bytes":{}}})", input.step,
                                     context_.model.store().num_params() * 4));
    }
  }
  return result;
}

double LocalSgd::end_epoch() {
  if (local_steps_ == 0) return 0.0;
  const auto start = TraceRecorder::Clock::now();
  const double seconds = average();
  if (context_.trace.enabled()) {
    context_.trace.add("average parameters (epoch end)", "comm", TraceRecorder::kComputeThread,
                       start, TraceRecorder::Clock::now());
  }
  return seconds;
}

void LocalSgd::before_evaluation() {
  // Mid-epoch (train.eval_every_steps): evaluate the average of the replicas, as the epoch's end
  // does, without changing what each replica trains on next.
  if (local_steps_ == 0) return;
  nn::ParamStore& store = context_.model.store();
  saved_params_.assign(store.params(), store.params() + store.num_params());
  saved_buffers_.assign(store.buffers(), store.buffers() + store.num_buffer_elements());
  mean_of_replicas();
  restore_after_evaluation_ = true;
}

void LocalSgd::after_evaluation() {
  if (!restore_after_evaluation_) return;
  nn::ParamStore& store = context_.model.store();
  std::copy(saved_params_.begin(), saved_params_.end(), store.params());
  std::copy(saved_buffers_.begin(), saved_buffers_.end(), store.buffers());
  restore_after_evaluation_ = false;
}

double LocalSgd::bytes_sent() const {
  double bytes = 0.0;
  for (const auto& [op, stats] : comm_.stats().snapshot()) {
    bytes += static_cast<double>(stats.bytes_sent);
  }
  return bytes;
}

double LocalSgd::average() {
  const auto start = std::chrono::steady_clock::now();
  const double sent_before = bytes_sent();
  if (compressed_) {
    compressed_average();
  } else {
    mean_of_replicas();
  }
  local_steps_ = 0;
  ++averages_;
  averaging_bytes_sent_ += bytes_sent() - sent_before;
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void LocalSgd::mean_of_replicas() {
  nn::ParamStore& store = context_.model.store();
  const auto ranks = static_cast<float>(context_.world);
  // The ranks compared their parameter layouts at start: the per-call header check (a round trip
  // through rank 0) goes with parallel.check_headers, as for data parallelism's buckets.
  comm::CollectiveOptions options;
  options.check_header = context_.config.parallel.check_headers;
  auto mean = [&](float* values, std::int64_t count) {
    if (count == 0) return;
    comm_.allreduce(values, count, DType::kF32, comm::ReduceOp::kSum, options);
    for (std::int64_t i = 0; i < count; ++i) values[i] /= ranks;
  };
  mean(store.params(), store.num_params());
  mean(store.buffers(), store.num_buffer_elements());  // batch-norm running statistics
}

void LocalSgd::compressed_average() {
  nn::ParamStore& store = context_.model.store();
  float* params = store.params();
  const std::size_t n = delta_.size();
  for (std::size_t i = 0; i < n; ++i) delta_[i] = params[i] - last_average_[i];
  compressed_->mean(delta_.data());
  for (std::size_t i = 0; i < n; ++i) {
    last_average_[i] += delta_[i];
    params[i] = last_average_[i];
  }
  mean_of_buffers();
}

void LocalSgd::mean_of_buffers() {
  nn::ParamStore& store = context_.model.store();
  if (store.num_buffer_elements() == 0) return;
  comm::CollectiveOptions options;
  options.check_header = context_.config.parallel.check_headers;
  comm_.allreduce(store.buffers(), store.num_buffer_elements(), DType::kF32, comm::ReduceOp::kSum,
                  options);
  const auto ranks = static_cast<float>(context_.world);
  for (std::int64_t i = 0; i < store.num_buffer_elements(); ++i) store.buffers()[i] /= ranks;
}

std::vector<optim::StateTensor> LocalSgd::checkpoint_state(const optim::Optimizer& optimizer) {
  std::vector<optim::StateTensor> mine = optimizer.state();
  if (compressed_) {
    // Error feedback's residual and the count the codec's seeds derive from: a resume continues
    // bitwise. x_avg is the model itself (checkpoints follow an epoch's closing average).
    std::vector<float> residual = compressed_->residual();
    if (!residual.empty()) mine.push_back({std::string(kResidual), std::move(residual)});
    // The count as the raw bits of an int64 in two floats: exact past 2^24 averages.
    std::vector<float> count(2);
    const std::int64_t calls = compressed_->calls();
    std::memcpy(count.data(), &calls, sizeof calls);
    mine.push_back({std::string(kAverages), std::move(count)});
  }
  return gather_per_rank(comm_, mine, /*root_only=*/false);
}

void LocalSgd::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                             optim::Optimizer& optimizer, const std::string& path) {
  PerRankState split = split_per_rank(state, context_.rank);
  if (split.writers == 0) {
    // A checkpoint of synchronous training: every replica starts from its (replicated) state.
    Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
    if (compressed_) {
      const nn::ParamStore& store = context_.model.store();
      last_average_.assign(store.params(), store.params() + store.num_params());
    }
    return;
  }
  check_per_rank_writers(split, context_.world, path, "the local SGD optimizer state",
                         "momentum is");
  std::vector<optim::StateTensor> optimizer_state;
  for (optim::StateTensor& tensor : split.mine) {
    if (tensor.name == kResidual) {
      if (compressed_ && !compressed_->residual().empty() &&
          tensor.values.size() == compressed_->residual().size()) {
        compressed_->set_residual(tensor.values);
      }
    } else if (tensor.name == kAverages) {
      if (compressed_ && tensor.values.size() == 2) {
        std::int64_t calls = 0;
        std::memcpy(&calls, tensor.values.data(), sizeof calls);
        compressed_->set_calls(calls);
      }
    } else {
      optimizer_state.push_back(std::move(tensor));
    }
  }
  Strategy::restore_state(std::move(optimizer_state), optimizer_steps, optimizer, path);
  if (compressed_) {
    // The checkpoint's model is the last average.
    const nn::ParamStore& store = context_.model.store();
    last_average_.assign(store.params(), store.params() + store.num_params());
  }
}

std::vector<std::string> LocalSgd::describe() const {
  const auto& settings = context_.config.local_sgd;
  const std::int64_t n = context_.model.store().num_params();
  const std::string algorithm = comm_.options().allreduce_algorithm;
  std::vector<std::string> lines = {fmt::format(
      "local SGD: {} ranks, parameters averaged every {} local step(s){} by {} allreduce; ring: "
      "2 (P-1)/P x 4N / H = {:.0f} bytes sent per rank and step{}",
      context_.world, settings.period,
      settings.synchronous_steps > 0
          ? fmt::format(" (every step for the first {})", settings.synchronous_steps)
          : "",
      algorithm, average_bytes(n, context_.world) / static_cast<double>(settings.period),
      algorithm == "ring" ? "" : " (other algorithms move other amounts)")};
  if (compressed_) {
    lines.push_back(fmt::format(
        "averages compressed: each rank sends its model delta since the last average through {} "
        "by {}, error feedback {}; {} = {:.0f} bytes sent per rank and average ({:.1f}x fewer "
        "than f32)",
        compressed_->spec().text(), compress::exchange_name(compressed_->codec().exchange()),
        compressed_->spec().error_feedback ? "on" : "off", compressed_->formula(),
        compressed_->predicted_bytes(),
        average_bytes(n, context_.world) / std::max(compressed_->predicted_bytes(), 1.0)));
  }
  return lines;
}

nlohmann::json LocalSgd::summary(const RunTotalsView& totals) {
  const auto& settings = context_.config.local_sgd;
  nlohmann::json ranks = totals.per_rank_rows();
  double sent = 0.0;
  for (const auto& row : ranks) sent += row["bytes_sent"].get<double>();
  // The ranks' averaging traffic, summed (collective: every rank calls summary()).
  double averaging = averaging_bytes_sent_;
  comm_.allreduce(&averaging, 1, DType::kF64, comm::ReduceOp::kSum);
  const double p = static_cast<double>(context_.world);
  const double steps = static_cast<double>(std::max<std::int64_t>(totals.steps, 1));
  const nn::ParamStore& store = context_.model.store();
  // Per average: the codec's declared payload for the parameters (ring formula), the buffers in
  // f32.
  const double per_average = compressed_
                                 ? compressed_->predicted_bytes() +
                                       average_bytes(store.num_buffer_elements(), context_.world)
                                 : average_bytes(store.num_params(), context_.world);
  const std::string formula = compressed_ ? compressed_->formula() + " + 2 (P-1)/P x 4B per average"
                                          : std::string("2 (P-1)/P x 4N per average");
  return {{"strategy", name()},
          {"compression", compressed_ ? compressed_->spec().text() : std::string("none")},
          {"error_feedback", compressed_ && compressed_->spec().error_feedback},
          {"ranks", context_.world},
          {"transport", std::string(comm_.transport().name())},
          {"period", settings.period},
          {"synchronous_steps", settings.synchronous_steps},
          {"averages", averages_},
          // Every collective of the run (averages, evaluation, epoch sums, checkpoint gathers).
          {"bytes_sent", sent},
          {"bytes_sent_per_rank_and_step", sent / steps / p},
          // The averages alone, measured, beside their formula.
          {"averaging_bytes_sent_per_rank_and_step", averaging / steps / p},
          {"averaging_bytes_formula", formula},
          {"averaging_bytes_sent_per_rank_and_step_predicted",
           per_average * static_cast<double>(averages_) / steps},
          {"per_rank", ranks}};
}

}  // namespace dtrain::train
