// Decentralized SGD (parallel.strategy = "decentralized"; docs/DECENTRALIZED.md): D-PSGD, Lian et
// al. 2017. Each rank keeps its own replica x_r and, every step, takes a local gradient step on its
// share of the global batch (the same LocalGradients as every replica strategy) and averages its
// parameters with its in-neighbours in decentralized.topology (comm/topology.h) by one
// neighbour allreduce: x_r <- sum_j W_rj x_j. No step waits for all ranks: a rank exchanges with
// its neighbours only (one-peer exponential: one message to one peer per step).
//
// Two orders (decentralized.overlap), in matrix form over the (P, N) replicas X and the local
// updates U(X) (lr x the optimizer's direction at each replica's own point):
//   false (default)  local step, then gossip:  X <- W (X - U(X))   ("adapt then combine", the
//                    form Koloskova et al. 2020 analyse). With topology "full" (W = 11^T / P) every
//                    replica holds the same average after every step, and with an optimizer
//                    linear in the gradient that average is synchronous data parallelism's update
//                    (the argument of local SGD with H = 1: the mean of the replicas' momenta
//                    follows the synchronous momentum), so "full" trains its trajectory to
//                    rounding.
//   true             gossip the pre-step parameters while forward and backward run, then step from
//                    the mixed point: X <- W X - U(X) (Lian et al.'s Algorithm 1, "adapt with
//                    combine", the form their paper analyses; their steps 2 and 3 run in
//                    parallel). The neighbour allreduce runs on the communicator's thread and
//                    reads the parameters, which forward and backward only read; it writes a
//                    buffer of its own, copied in before the update. Even "full" does not equal
//                    synchronous training here: each replica's gradient is taken at its own point.
// Batch-norm running statistics (forward writes them) are mixed after the step in both orders, by
// a second neighbour allreduce where the model has any.
//
// Each rank's gradient is its share's mean gradient scaled as a 1/P part of the global batch (as
// local SGD does), so the replicas' mean follows the global batch's gradient.
//
// decentralized.global_average_every = H > 0: every H-th step replaces the gossip by a global
// average (allreduce sum / P, parallel.allreduce) after the local step; W is doubly stochastic, so
// gossip before a global average would change nothing.
//
// Evaluation measures the replicas' average: before it each rank saves its replica and the store
// takes the average (one allreduce of the model), after it each rank gets its replica back, so
// evaluation never changes the training. That same average gives the consensus distance,
// mean_r ||x_r - x_bar||^2 over the parameters (plus one scalar allreduce), recorded at every
// evaluation and at the end. At the end of the run each rank evaluates its own replica on the
// whole test set (when the launcher handed the strategy the test set: run_decentralized_rank) and
// then holds the average: the model the run reports.
//
// Cost per rank and step (N parameters, B buffer values, 4 bytes each):
//   gossip          out-degree x 4(N + B) bytes sent, one message per out-neighbour, no global
//                   synchronization: ring 2, torus 4 (3 with a side of 2), exponential
//                   2 log2 P - 1 for P a power of two, one-peer exponential 1, full P - 1
//   global average  2 (P-1)/P x 4(N + B) every H steps (ring allreduce)
//   evaluation      2 (P-1)/P x 4(N + B) per evaluation (the average), plus 8 bytes; a
//                   checkpoint and the end of the run reuse it when no step ran since
//   checkpoint      each rank's parameters, buffers and optimizer state, gathered at rank 0
// Ring allreduce of the gradients (synchronous data parallelism) sends 2 (P-1)/P x 4N per step:
// one-peer exponential sends 1 / (2 (P-1)/P) of that, the static graphs more.
//
// decentralized.compression (or consensus_step > 0): CHOCO-SGD's compressed gossip instead of the
// neighbour allreduce of the parameters (choco_gossip.h): each rank sends C(x - x_hat) to its
// out-neighbours, out-degree x encoded_bytes(N) bytes per step, and mixes with the consensus step
// gamma. Static topologies only, after the local step only (overlap = false); buffers are still
// gossiped exactly.
//
// The gossip skips the per-call header check (CollectiveOptions::check_header = false): the check
// is 2(P-1) messages through rank 0 every call, a global synchronization per step, which is what
// decentralized SGD exists to avoid; and the arguments are equal on every rank by construction
// (the Trainer compares the configuration and the parameter layout across ranks at start, the
// topology is built from that configuration, and the step is the Trainer's global step). The rare
// global averages and evaluation averages follow parallel.check_headers, as local SGD's do.
//
// Checkpoints: the model stored is the replicas' average (what evaluation measured); beside it
// each rank's parameters, buffers and optimizer state, gathered at rank 0 and stored per rank
// ("rank3/params", "rank3/buffers", "rank3/momentum"), so that a resume continues bitwise. A resume
// needs the same number of ranks; every rank refuses another with the same one-line error. A
// checkpoint of synchronous training resumes with every replica starting from its model and
// state; one of local SGD with each rank's own state.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "dtrain/comm/topology.h"
#include "dtrain/data/dataset.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/strategies/decentralized/choco_gossip.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

struct TrainerOptions;

class DecentralizedSgd final : public Strategy {
 public:
  // Collective over context.comm (which must be set): builds the topology (a ConfigError naming
  // the numbers, on every rank alike, when it does not exist for the rank count), then broadcasts
  // rank 0's parameters. `test`, when set, is the test set each rank evaluates its own replica on
  // at the end (it must outlive the strategy).
  DecentralizedSgd(const StrategyContext& context, const data::Dataset* test = nullptr);
  std::string name() const override { return "decentralized"; }
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  void before_evaluation() override;
  void after_evaluation() override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;
  void finish(bool writer) override;

  // `config`'s topology on `ranks` ranks; ConfigError naming decentralized.topology and the rank
  // count when it does not exist there (a torus on 7 ranks).
  static comm::Topology topology_for(const Config& config, int ranks);
  // The ring allreduce's bytes sent per rank for one average of `values` floats over `ranks`:
  // 2 (P-1)/P x 4 values.
  static double ring_allreduce_bytes(std::int64_t values, int ranks);

 private:
  // The store's parameters and buffers into saved_params_ / saved_buffers_ (replica_saved_).
  void save_replica();
  // Back from saved_params_ / saved_buffers_, if saved.
  void restore_replica();
  // Saves the replica, puts the replicas' average into the store (allreduce sum, / P) and returns
  // the consensus distance mean_r ||x_r - x_bar||^2 over the parameters (one more scalar
  // allreduce). Collective.
  double average_into_store();
  // allreduce sum / P of the parameters and buffers, in place.
  void global_mean();
  // One neighbour allreduce of the buffers (batch-norm statistics), in place; nothing without.
  void gossip_buffers(std::int64_t step);
  // Accuracy of the model in the store on the whole test set, this rank alone.
  double evaluate_alone();
  // Bytes this rank has sent over comm_, all operations together.
  double bytes_sent() const;
  // The bytes of one model as gossip sends it: 4 (N + B); with CHOCO the codec's payload for N,
  // plus 4B.
  double model_bytes() const;

  comm::Communicator& comm_;
  comm::Topology topology_;
  const data::Dataset* test_ = nullptr;
  std::vector<int> out_degree_;  // out-neighbours of this rank at step t, indexed t mod period
  std::vector<float> mixed_;     // overlap: the gossiped pre-step parameters, (N)
  std::unique_ptr<ChocoGossip> choco_;  // compressed gossip (or null: the neighbour allreduce)
  bool choco_reset_ = false;            // a resume changed the replicas: reset before the step
  std::int64_t steps_done_ = 0;         // the global step after the last step() (for records)
  std::int64_t gossip_steps_ = 0;
  std::int64_t global_averages_ = 0;
  double gossip_bytes_start_ = 0;         // the neighbour allreduce counter at start
  double gossip_bytes_predicted_ = 0;     // sum over gossip steps of out-degree x model bytes
  double global_average_bytes_sent_ = 0;  // measured around each global average
  // (global step, consensus distance) at each evaluation.
  std::vector<std::pair<std::int64_t, double>> consensus_;
  std::optional<double> final_consensus_;
  std::optional<double> replica_accuracy_;  // this rank's replica at the end
  // The last average and its consensus distance, computed after step average_at_ (reused while
  // no step has run since).
  std::vector<float> average_params_;
  std::vector<float> average_buffers_;
  std::int64_t average_at_ = -1;
  double average_consensus_ = 0.0;
  // This replica while the store holds the average (evaluation, after a checkpoint).
  std::vector<float> saved_params_;
  std::vector<float> saved_buffers_;
  bool replica_saved_ = false;
};

// The launcher's hook (StrategyInfo::run_rank): one Trainer on this rank whose strategy is
// DecentralizedSgd with the run's test set, for the replicas' accuracies at the end. Returns the
// summary on every rank.
std::optional<RunSummary> run_decentralized_rank(comm::Communicator& comm, const Config& config,
                                                 const TrainerOptions& options,
                                                 const std::shared_ptr<const RunData>& data);

}  // namespace dtrain::train
