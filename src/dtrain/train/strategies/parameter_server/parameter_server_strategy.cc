#include "dtrain/train/strategies/parameter_server/parameter_server_strategy.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/train/strategies/parameter_server/ps_run.h"
#include "dtrain/train/strategies/parameter_server/ticket_plan.h"
#include "dtrain/train/strategies/per_rank_state.h"

namespace dtrain::train {

ParameterServerWorker::ParameterServerWorker(const StrategyContext& context, ps::Client& client)
    : Strategy(context), client_(client) {
  comm::Communicator& workers = required_communicator(context, "parameter-server training");
  nn::ParamStore& store = context.model.store();
  const ps::KeyRange all{0, store.num_params()};
  if (client_.layout().total() != all.end) {
    throw InternalError(fmt::format("parameter servers hold {} keys, the model has {} parameters",
                                    client_.layout().total(), all.end));
  }
  if (context.rank == 0) client_.put(all, store.params());
  if (context.config.data_parallel.worker_momentum > 0.0) {
    worker_momentum_.assign(static_cast<std::size_t>(all.size()), 0.0f);
  }
  workers.barrier();
  client_.pull(all, store.params(), 0);
}

std::unique_ptr<data::SharePlan> ParameterServerWorker::share_plan(
    std::int64_t train_samples) const {
  if (!ticketed()) return Strategy::share_plan(train_samples);
  return std::make_unique<TicketPlan>(context_.config, context_.world, train_samples, client_);
}

StepResult ParameterServerWorker::step(const StepInput& input, optim::Optimizer& optimizer) {
  using Clock = TraceRecorder::Clock;
  nn::ParamStore& store = context_.model.store();
  if (pull_first_) {
    client_.pull({0, store.num_params()}, store.params(), input.step);
    pull_first_ = false;
  }
  const LocalGradients::Result local =
      context_.local.compute(input.x, input.labels, input.step, input.global_count);
  if (!worker_momentum_.empty()) apply_worker_momentum(input);
  const auto& p = context_.config.parameter_server;
  const bool pull = p.consistency != "async" || (input.step + 1) % p.pull_every == 0;
  const auto start = Clock::now();
  const ps::PushResult pushed = client_.push(
      {0, store.num_params()}, store.grads(),
      {input.step, input.x.dim(0), input.global_count, input.lr}, pull ? store.params() : nullptr);
  const auto end = Clock::now();
  if (pushed.dropped) ++dropped_steps_;
  // This optimizer updates nothing; it counts the servers' updates for the checkpoint.
  while (optimizer.steps() < pushed.version) optimizer.finish_step();
  if (context_.trace.enabled()) {
    context_.trace.add(pull ? "push and pull" : "push", "comm", TraceRecorder::kComputeThread,
                       start, end,
                       fmt::format(R"({{"step":{},"dropped":{}}})", input.step, pushed.dropped));
  }
  StepResult result;
  result.loss = local.mean_loss();
  result.correct = local.correct;
  result.waiting = std::chrono::duration<double>(end - start).count();
  result.comm = result.waiting;
  return result;
}

void ParameterServerWorker::apply_worker_momentum(const StepInput& input) {
  nn::ParamStore& store = context_.model.store();
  const auto samples = static_cast<double>(input.x.dim(0));
  const auto batch = static_cast<double>(input.global_count);
  if (samples <= 0.0 || batch <= 0.0) return;
  const auto beta = static_cast<float>(context_.config.data_parallel.worker_momentum);
  // The server's row is the push times B / samples: this worker's own mean gradient, here its
  // momentum (docs/ROBUST.md "Worker momentum").
  const auto to_mean = static_cast<float>(batch / samples);
  const auto to_share = static_cast<float>(samples / batch);
  float* grads = store.grads();
  float* momentum = worker_momentum_.data();
  const std::int64_t n = store.num_params();
  for (std::int64_t i = 0; i < n; ++i) {
    momentum[i] = beta * momentum[i] + grads[i] * to_mean;
    grads[i] = momentum[i] * to_share;
  }
}

void ParameterServerWorker::before_evaluation() {
  // bsp: the worker pulled this step's parameters, unless the pull was cast (pull_compression):
  // then evaluate the servers' f32 copy, and pull the cast one again before the next step.
  if (!ticketed() && !client_.compression().pulls_encoded()) return;
  nn::ParamStore& store = context_.model.store();
  client_.get({0, store.num_params()}, store.params());
  if (!ticketed()) pull_first_ = true;
}

std::vector<optim::StateTensor> ParameterServerWorker::checkpoint_state(
    const optim::Optimizer& optimizer) {
  // bsp with error feedback: every worker's residual, gathered at worker 0 (collective over the
  // workers: bsp checkpoints are taken by all of them at the same step).
  std::vector<optim::StateTensor> mine;
  if (!ticketed() && !client_.residual().empty()) {
    const auto residual = client_.residual();
    mine.push_back({"compression/residual", {residual.begin(), residual.end()}});
  }
  if (!ticketed() && !worker_momentum_.empty()) {
    mine.push_back({"robust/worker_momentum", worker_momentum_});
  }
  std::vector<optim::StateTensor> residuals;
  if (!mine.empty()) {
    residuals = gather_per_rank(required_communicator(context_, "parameter-server training"), mine,
                                /*root_only=*/true);
  }
  if (context_.rank != 0) return {};  // worker 0 writes the checkpoint
  // async / ssp with error feedback: the other workers never meet this one, so each sends its
  // residual to the servers with its next request (or sent it before its stop), while worker 0
  // fetches the servers' state below; worker 0 then collects them (ps/protocol.h, kResidualRound).
  const bool carried_residuals = ticketed() && !client_.residual().empty();
  if (carried_residuals && context_.world > 1) client_.begin_residual_round();
  nn::ParamStore& store = context_.model.store();
  const ps::KeyRange all{0, store.num_params()};
  // async / ssp: the servers' parameters now, with the state below, not this worker's last pull;
  // bsp with cast pulls: the servers' f32 copy (this worker pulls the cast one before its next
  // step, as a resumed run does).
  if (ticketed() || client_.compression().pulls_encoded()) {
    client_.get(all, store.params());
    pull_first_ = true;
  }
  ps::OptimizerState servers = client_.get_state(all);
  std::vector<optim::StateTensor> state = optimizer.state();
  if (servers.vectors.size() != state.size()) {
    throw InternalError(
        fmt::format("parameter servers keep {} optimizer state vectors, the workers' optimizer {}",
                    servers.vectors.size(), state.size()));
  }
  // From the key layout to the one-worker optimizer's (its segments packed in order).
  for (std::size_t v = 0; v < state.size(); ++v) {
    std::size_t at = 0;
    for (const optim::Segment& segment : optimizer.segments()) {
      std::copy_n(servers.vectors[v].begin() + segment.offset, segment.numel,
                  state[v].values.begin() + static_cast<std::ptrdiff_t>(at));
      at += static_cast<std::size_t>(segment.numel);
    }
  }
  for (optim::StateTensor& tensor : residuals) state.push_back(std::move(tensor));
  if (carried_residuals) {
    // The workers' count, then each residual that came (one that could not is left out, and that
    // worker's restarts at zero).
    state.push_back({std::string(kResidualWorkers), {static_cast<float>(context_.world)}});
    for (int w = 0; w < context_.world; ++w) {
      const auto own = client_.residual();
      std::vector<float> values =
          w == 0 ? std::vector<float>(own.begin(), own.end()) : client_.get_residual(w);
      if (!values.empty()) {
        state.push_back({rank_prefix(w) + "compression/residual", std::move(values)});
      }
    }
  }
  if (robust()) {
    const std::vector<std::vector<float>> kept = client_.get_aggregator_states();
    for (std::size_t s = 0; s < kept.size(); ++s) {
      state.push_back({aggregator_state_name(static_cast<int>(s)), kept[s]});
    }
  }
  return state;
}

bool ParameterServerWorker::robust() const {
  const auto& dp = context_.config.data_parallel;
  return !ticketed() && (dp.aggregator != "mean" || dp.attack != "none");
}

std::string ParameterServerWorker::aggregator_state_name(int server) {
  return fmt::format("ps/aggregator_state/server{}", server);
}

void ParameterServerWorker::restore_aggregator_states(std::vector<optim::StateTensor>& state,
                                                      const std::string& path) {
  std::vector<std::vector<float>> saved;
  for (int s = 0;; ++s) {
    const auto it = std::find_if(state.begin(), state.end(), [&](const optim::StateTensor& t) {
      return t.name == aggregator_state_name(s);
    });
    if (it == state.end()) break;
    saved.push_back(std::move(it->values));
    state.erase(it);
  }
  if (!robust() || context_.rank != 0) return;
  const int servers = client_.layout().servers();
  if (std::ssize(saved) != servers) {
    log::warn(
        "checkpoint {} holds the aggregator state of {} parameter server(s), this run has "
        "{}: the servers' aggregators (centered clipping's centre, bucketing's shuffles) "
        "restart",
        path, saved.size(), servers);
    return;
  }
  const std::vector<bool> loaded = client_.set_aggregator_states(saved);
  for (int s = 0; s < servers; ++s) {
    if (!loaded[static_cast<std::size_t>(s)]) {
      log::warn(
          "checkpoint {}: parameter server {}'s aggregator state does not fit its aggregator "
          "{} (another aggregator or shard): it restarts",
          path, s, context_.config.data_parallel.aggregator);
    }
  }
}

namespace {

// This rank's tensor `name` of a split checkpoint, or null.
const optim::StateTensor* find_own(const PerRankState& split, const std::string& name) {
  for (const optim::StateTensor& tensor : split.mine) {
    if (tensor.name == name) return &tensor;
  }
  return nullptr;
}

}  // namespace

void ParameterServerWorker::restore_per_worker_state(std::vector<optim::StateTensor>& state,
                                                     const std::string& path) {
  // async / ssp: the workers that wrote the residuals (some may be missing).
  std::int64_t carried_by = -1;
  for (auto it = state.begin(); it != state.end(); ++it) {
    if (it->name == kResidualWorkers && !it->values.empty()) {
      carried_by = static_cast<std::int64_t>(it->values.front());
      state.erase(it);
      break;
    }
  }
  PerRankState split = split_per_rank(state, context_.rank);
  if (carried_by >= 0) split.writers = static_cast<std::size_t>(carried_by);
  std::erase_if(state,
                [](const optim::StateTensor& tensor) { return tensor.name.rfind("rank", 0) == 0; });
  if (!worker_momentum_.empty()) {
    const optim::StateTensor* saved = find_own(split, "robust/worker_momentum");
    if (std::cmp_equal(split.writers, context_.world) && saved != nullptr &&
        saved->values.size() == worker_momentum_.size()) {
      worker_momentum_ = saved->values;
    } else if (context_.rank == 0) {
      log::warn("checkpoint {} holds {}: worker momentum restarts at zero", path,
                saved == nullptr ? std::string("no worker momentum")
                                 : fmt::format("the momenta of {} workers, this run has {}",
                                               split.writers, context_.world));
    }
  }
  if (client_.residual().empty()) return;
  const optim::StateTensor* residual = find_own(split, "compression/residual");
  if (std::cmp_equal(split.writers, context_.world) && residual != nullptr &&
      std::ssize(residual->values) == client_.layout().total()) {
    client_.set_residual(residual->values);
    return;
  }
  if (carried_by >= 0 && std::cmp_equal(carried_by, context_.world)) {
    // async / ssp: this worker's did not come at the checkpoint (ps/protocol.h, kGetResidual).
    log::warn(
        "checkpoint {} holds no residual of worker {} (it was held by the staleness bound or "
        "had stopped without one): its error-feedback residual restarts at zero",
        path, context_.rank);
    return;
  }
  if (context_.rank == 0) {
    log::warn("checkpoint {} holds {}: error-feedback residuals of the pushes restart at zero",
              path,
              split.writers == 0 ? std::string("no worker's residual")
                                 : fmt::format("the residuals of {} workers, this run has {}",
                                               split.writers, context_.world));
  }
}

void ParameterServerWorker::restore_state(std::vector<optim::StateTensor> state,
                                          std::int64_t optimizer_steps, optim::Optimizer& optimizer,
                                          const std::string& path) {
  restore_per_worker_state(state, path);
  // Worker 0 alone talks to the servers here; the barrier below holds the others.
  restore_aggregator_states(state, path);
  nn::ParamStore& store = context_.model.store();
  const ps::KeyRange all{0, store.num_params()};
  // The checkpoint's state by key, which each server cuts its range from.
  std::vector<std::vector<float>> by_key;
  for (const optim::StateTensor& tensor : state) {
    std::vector<float> values(static_cast<std::size_t>(all.size()), 0.0f);
    std::size_t at = 0;
    for (const optim::Segment& segment : optimizer.segments()) {
      if (at + static_cast<std::size_t>(segment.numel) > tensor.values.size()) break;
      std::copy_n(tensor.values.begin() + static_cast<std::ptrdiff_t>(at), segment.numel,
                  values.begin() + segment.offset);
      at += static_cast<std::size_t>(segment.numel);
    }
    by_key.push_back(std::move(values));
  }
  // Checks names and sizes against the run's optimizer (naming the file) and sets its step count.
  Strategy::restore_state(std::move(state), optimizer_steps, optimizer, path);
  // The servers hold what the constructor put there; worker 0 replaces it before anyone pushes.
  if (context_.rank == 0) {
    client_.put(all, store.params());
    client_.set_state(all, by_key, optimizer_steps);
  }
  required_communicator(context_, "parameter-server training").barrier();
  pull_first_ = ticketed() || client_.compression().pulls_encoded();
}

std::vector<std::string> ParameterServerWorker::describe() const {
  const auto& p = context_.config.parameter_server;
  return {fmt::format(
              "parameter servers: {} workers, {} servers, consistency {}{}{}{}", context_.world,
              client_.layout().servers(), p.consistency,
              p.consistency == "ssp" ? fmt::format(" (staleness <= {})", p.staleness) : "",
              p.consistency == "async" && p.pull_every > 1
                  ? fmt::format(", pull every {} steps", p.pull_every)
                  : "",
              p.backup_workers > 0 ? fmt::format(", {} backup worker(s)", p.backup_workers) : ""),
          push_line(), pull_line(), aggregation_line()};
}

std::string ParameterServerWorker::aggregation_line() const {
  const auto& dp = context_.config.data_parallel;
  if (dp.aggregator == "mean" && dp.attack == "none") {
    return "aggregation: the servers sum the workers' gradients (the mean of the batch)";
  }
  return fmt::format(
      "aggregation: each server keeps the step's W = {} gradients as rows and combines them with "
      "{}{} (W x shard floats per server)",
      context_.world, dp.aggregator,
      dp.attack == "none"
          ? std::string()
          : fmt::format("; the last {} worker(s) send {}", dp.byzantine, dp.attack));
}

std::string ParameterServerWorker::push_line() const {
  const ps::Compression& c = client_.compression();
  return fmt::format("pushes {}{}: {}", c.pushes_encoded() ? "compressed, " : "uncompressed",
                     c.pushes_encoded()
                         ? fmt::format("{} decoded by the servers, error feedback {} per worker",
                                       c.push.text(), c.push.error_feedback ? "on" : "off")
                         : std::string(),
                     ps::push_bytes_formula(c, client_.layout()));
}

std::string ParameterServerWorker::pull_line() const {
  const ps::Compression& c = client_.compression();
  return fmt::format("pulls {}: {}",
                     c.pulls_encoded() ? "cast to " + c.pull.text() + " (f32 kept on the servers)"
                                       : std::string("f32"),
                     ps::pull_bytes_formula(c, client_.layout()));
}

void ParameterServerWorker::finish(bool writer) {
  if (writer) {
    server_stats_ = client_.stop_with_stats();  // once every worker has stopped
  } else {
    // async / ssp: the residual goes to the servers first, for a checkpoint worker 0 still takes.
    client_.stop(/*with_residual=*/ticketed());
  }
}

nlohmann::json ParameterServerWorker::summary(const RunTotalsView& totals) {
  nlohmann::json out = ps_summary(context_.config, context_.world, server_stats_, dropped_steps_);
  // Worker 0's traffic to and from the servers, per step.
  const double steps = static_cast<double>(std::max<std::int64_t>(totals.steps, 1));
  out["bytes_sent_per_rank_and_step"] = static_cast<double>(client_.bytes_sent()) / steps;
  out["bytes_received_per_rank_and_step"] = static_cast<double>(client_.bytes_received()) / steps;
  // Each push and each reply with parameters beside its formula (ps/compression.h).
  const ps::Compression& c = client_.compression();
  const auto per = [](std::int64_t bytes, std::int64_t count) {
    return count > 0 ? static_cast<double>(bytes) / static_cast<double>(count) : 0.0;
  };
  out["aggregator"] = context_.config.data_parallel.aggregator;
  out["attack"] = context_.config.data_parallel.attack;
  out["byzantine"] = context_.config.data_parallel.byzantine;
  out["compression"] = c.push.text();
  out["error_feedback"] = c.pushes_encoded() && c.push.error_feedback;
  out["pull_compression"] = c.pull.text();
  out["bytes_per_push"] = per(client_.push_bytes(), client_.pushes());
  out["predicted_bytes_per_push"] = ps::predicted_push_bytes(c, client_.layout());
  out["predicted_push_formula"] = ps::push_bytes_formula(c, client_.layout());
  out["bytes_per_pull"] = per(client_.param_reply_bytes(), client_.param_replies());
  out["predicted_bytes_per_pull"] = ps::predicted_pull_bytes(c, client_.layout());
  out["predicted_pull_formula"] = ps::pull_bytes_formula(c, client_.layout());
  if (collective()) out["per_rank"] = totals.per_rank_rows();
  return out;
}

}  // namespace dtrain::train
