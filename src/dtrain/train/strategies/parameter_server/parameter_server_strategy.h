// A parameter-server worker (parallel.strategy = "parameter_server"; docs/PS.md): forward and
// backward of its share, then the gradients pushed to the servers, which apply the optimizer, and
// the parameters pulled back (every step, or every parameter_server.pull_every steps with async).
// Which rank serves and which works is ps_run.h's; this is the worker's side.
//
// consistency bsp: shares of a global batch, as data parallelism (and the same update).
// async / ssp: batches are tickets (ticket_plan.h); the workers never wait for each other, so
// worker 0 alone evaluates, on what the servers hold at that moment (its time counts as training
// time: the others train on meanwhile).
// Checkpoints: the parameters and the optimizer state live on the servers; at a checkpoint worker 0
// gathers both from them (ps::Client::get_state) in the one-worker layout, so a checkpoint does not
// depend on the number of servers or workers that wrote it, and on resume worker 0 puts them back,
// each server taking its key range. The worker's own optimizer (which updates nothing) counts the
// servers' updates, so a checkpoint's optimizer_steps is theirs. bsp resumes bitwise; async and ssp
// resume from a snapshot taken while other workers may still push (docs/PS.md, "Checkpoints"),
// also inside an epoch: worker 0 alone takes those, by its own steps and clock, at the position of
// the tickets handed out. With error feedback on compressed pushes, checkpoints also hold every
// worker's residual (bsp: gathered over the workers; async / ssp: sent through the servers,
// ps/protocol.h kResidualRound), and with robust aggregation each server's aggregator state.
// Worker momentum (data_parallel.worker_momentum, bsp with robust aggregation; docs/ROBUST.md):
// each worker pushes its momentum m <- beta m + g (g its own mean gradient) instead of g, in the
// push's units (times its share of the batch), so the servers' rows are the workers' momenta; bsp
// checkpoints hold every worker's m ("rank<w>/robust/worker_momentum"). Cost: N floats and one
// pass over N per step.
#pragma once

#include <vector>

#include "dtrain/ps/client.h"
#include "dtrain/ps/server_stats.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

class ParameterServerWorker final : public Strategy {
 public:
  // Worker 0 puts its initial parameters on the servers, then every worker pulls them (collective
  // over context.comm, the workers' communicator). `client` must outlive the strategy.
  ParameterServerWorker(const StrategyContext& context, ps::Client& client);
  std::string name() const override { return "parameter_server"; }
  std::unique_ptr<data::SharePlan> share_plan(std::int64_t train_samples) const override;
  bool collective() const override { return !ticketed(); }
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  void before_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  // One worker's layout whatever the servers and workers: any count resumes it (bsp: the same
  // global batches; async / ssp: the tickets of the remaining epochs, cut for the new count).
  bool reshards_checkpoints() const override { return true; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  void finish(bool writer) override;
  nlohmann::json summary(const RunTotalsView& totals) override;

 private:
  bool ticketed() const { return context_.config.parameter_server.consistency != "bsp"; }
  // async / ssp checkpoints with error feedback: the number of workers whose residuals the
  // checkpoint carries ("rank<w>/compression/residual" of those that came).
  static constexpr std::string_view kResidualWorkers = "ps/residual_workers";
  // The banner's lines on compression: what a push and a pull carry, beside the bytes' formula.
  std::string push_line() const;
  std::string pull_line() const;
  // How the servers combine a step's gradients: the sum, or an aggregator (and the attack).
  std::string aggregation_line() const;
  // Takes this worker's error-feedback residual and worker momentum out of a checkpoint's state
  // (checkpoints hold every worker's, "rank<w>/compression/residual" and, bsp only,
  // "rank<w>/robust/worker_momentum"); another worker count, or none saved (an async / ssp worker
  // whose residual could not come), restarts them at zero with a warning.
  void restore_per_worker_state(std::vector<optim::StateTensor>& state, const std::string& path);
  // Worker momentum: the pushed gradient (store.grads(), its share of the batch's mean gradient)
  // becomes the share of this worker's momentum, m <- beta m + grads x B / samples.
  void apply_worker_momentum(const StepInput& input);
  // bsp with robust aggregation (an aggregator other than the mean, or an attack).
  bool robust() const;
  // Checkpoints hold each server's aggregator state under this name (its shard's: centered
  // clipping's centre over the shard), so it resumes on as many servers; another count restarts
  // them and worker 0 says so.
  static std::string aggregator_state_name(int server);
  void restore_aggregator_states(std::vector<optim::StateTensor>& state, const std::string& path);

  ps::Client& client_;
  std::int64_t dropped_steps_ = 0;  // bsp with backup workers: this worker's late gradients
  // async / ssp after a resume: pull at the first step, so that the servers see this worker's
  // clock and the staleness basis is the resumed run's.
  bool pull_first_ = false;
  std::vector<ps::ServerStats> server_stats_;  // worker 0, after finish()
  std::vector<float> worker_momentum_;         // N floats with worker momentum, else empty
};

}  // namespace dtrain::train
