// Federated averaging (parallel.strategy = "federated"; docs/FEDERATED.md): FedAvg of McMahan et
// al. 2017, FedProx (Li et al. 2020) as an option, over K simulated clients.
//
// The training set is cut into K = federated.clients clients (data/client_partition.h: iid,
// shards, dirichlet:A). Each round t = 1 .. federated.rounds:
//   1. the server samples m = max(1, floor(C K)) clients (round_plan.h) and sends them w_g;
//   2. each participant runs E local epochs of SGD from w_g on its own samples (client_update.h);
//      one that fails (federated.client_failure, injected) is dropped from the round and counted;
//   3. w_g <- sum_k n_k w_k / sum_k n_k over the participants that completed
//      (federated_average.h); when none did, w_g stays;
//   4. w_g is evaluated on the test set (sharded over the ranks).
// The clients are simulated: the P ranks (threads, or processes under mpirun) each run their share
// of the participants one after another (participant j on rank j mod P) on one working copy of
// the model, and step 3's sum is one allreduce over the ranks. So 100 clients run on one machine;
// P only changes the wall time (and the f64 rounding of the sum's order), not what is trained.
//
// Traffic, per round, as a deployment would move it (N trained values, B buffer values, f32):
//   down  m x 4 (N + B) bytes       the global model to every participant
//   up    c x 4 (N + B) bytes       each completed participant's model back (c = m - failed)
// With federated.compression each upload is the client's model delta w_k - w_g through the codec
// (no error feedback: clients are stateless), c x (encoded_bytes(N) + 4B) up; with
// federated.compress_download the broadcast is the global model's delta through it too (error
// feedback at the server by the codec's default), m x (encoded_bytes(N) + 4B) down.
// summed over the rounds, and the rounds and bytes (down + up) until each of
// train.accuracy_targets is first reached (summary.json "parallel"). The simulation's own traffic
// between ranks is measured too (the allreduce of the f64 sums: 8 (N + B + 8) bytes per round).
//
// The run folder: resolved.toml; partition.json (the partition's name, each client's sample count
// and label histogram); metrics.jsonl, one {"kind":"round"} record per round (participants,
// completed, failed, bytes down/up with the formula's figures, train loss and accuracy of the
// local epochs, test loss and accuracy of w_g, seconds); summary.json (epochs = rounds run);
// checkpoints/ (epoch-<round>.ckpt after every train.checkpoint_every rounds, the last round and a
// stop: the global model, the server's error-feedback residual, the run's counters), from which
// --resume continues bitwise, on any number of ranks up to the f64 rounding of the round's sum. A
// stop signal (SIGTERM, SIGINT) ends the run after the current round on every rank, with a
// checkpoint.
//
// Keys: [federated] (clients, client_fraction, local_epochs, rounds, partition, fedprox_mu,
// client_failure, compression, compress_download), train.batch_size (B, the local batch),
// train.seed (partition, sampling, local orders, initialisation), train.accuracy_targets, optim.*
// (the local optimizer, fresh each round; the rate is optim.lr, constant), parallel.workers
// (ranks), parallel.allreduce.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/train/config.h"
#include "dtrain/train/metrics.h"
#include "dtrain/train/run_data.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {

// Errors, on every rank alike, for what a federated run cannot do with `ranks` ranks: more ranks
// than clients (a rank without clients; with the numbers), text data (one label per sample is what
// the partitions split by).
void check_federated_config(const Config& config, int ranks);

class FederatedRun {
 public:
  // Builds the model (train.seed, the same on every rank) and the partition; checks the config.
  // `comm` null: one rank. Collective when comm is set (the ranks compare their configs).
  FederatedRun(comm::Communicator* comm, const Config& config, const TrainerOptions& options,
               std::shared_ptr<const RunData> data);
  ~FederatedRun();

  // Trains federated.rounds rounds; rank 0 writes the run folder and returns the summary (the
  // other ranks return it too, without writing). Collective.
  RunSummary run();

  // The global model's trained values and buffers (after run(): the last round's average).
  std::span<const float> global_params() const { return global_params_; }
  std::span<const float> global_buffers() const { return global_buffers_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::vector<float> global_params_;
  std::vector<float> global_buffers_;
};

// StrategyInfo::run_rank of "federated": a FederatedRun on this rank.
std::optional<RunSummary> run_federated_rank(comm::Communicator& comm, const Config& config,
                                             const TrainerOptions& options,
                                             const std::shared_ptr<const RunData>& data);

}  // namespace dtrain::train
