#include "dtrain/train/strategies/local_sgd/local_sgd.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string_view>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/parallel/rank_agreement.h"
#include "dtrain/train/strategies/per_rank_state.h"
#include "dtrain/train/strategies/single_worker.h"

namespace dtrain::train {

namespace {}  // namespace

LocalSgd::LocalSgd(const StrategyContext& context)
    : Strategy(context), comm_(required_communicator(context, "local SGD")) {
  parallel::broadcast_parameters(comm_, context.model.store());
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
  mean_of_replicas();
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

std::vector<optim::StateTensor> LocalSgd::checkpoint_state(const optim::Optimizer& optimizer) {
  return gather_per_rank(comm_, optimizer.state(), /*root_only=*/false);
}

void LocalSgd::restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                             optim::Optimizer& optimizer, const std::string& path) {
  PerRankState split = split_per_rank(state, context_.rank);
  if (split.writers == 0) {
    // A checkpoint of synchronous training: every replica starts from its (replicated) state.
    Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
    return;
  }
  check_per_rank_writers(split, context_.world, path, "the local SGD optimizer state",
                         "momentum is");
  Strategy::restore_state(std::move(split.mine), optimizer_steps, optimizer, path);
}

std::vector<std::string> LocalSgd::describe() const {
  const auto& settings = context_.config.local_sgd;
  const std::int64_t n = context_.model.store().num_params();
  const std::string algorithm = comm_.options().allreduce_algorithm;
  return {fmt::format(
      "local SGD: {} ranks, parameters averaged every {} local step(s){} by {} allreduce; ring: "
      "2 (P-1)/P x 4N / H = {:.0f} bytes sent per rank and step{}",
      context_.world, settings.period,
      settings.synchronous_steps > 0
          ? fmt::format(" (every step for the first {})", settings.synchronous_steps)
          : "",
      algorithm, average_bytes(n, context_.world) / static_cast<double>(settings.period),
      algorithm == "ring" ? "" : " (other algorithms move other amounts)")};
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
  const double per_average = average_bytes(context_.model.store().num_params(), context_.world);
  return {{"strategy", name()},
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
          {"averaging_bytes_formula", "2 (P-1)/P x 4N per average"},
          {"averaging_bytes_sent_per_rank_and_step_predicted",
           per_average * static_cast<double>(averages_) / steps},
          {"per_rank", ranks}};
}

}  // namespace dtrain::train
