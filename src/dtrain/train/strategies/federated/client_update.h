// One federated client's local training (docs/FEDERATED.md): ClientUpdate of McMahan et al. 2017,
// Algorithm 1, with FedProx's proximal term (Li et al. 2020) as an option.
//
// From the global model w_g, client k with n_k samples runs E = federated.local_epochs epochs of
// mini-batch SGD (optim.*, a fresh optimizer each round: clients keep no state between rounds) on
// its own samples, in batches of B = train.batch_size (the last batch of an epoch may be short),
// each epoch in its own seeded order (stream (round K + client, epoch)): ceil(n_k / B) steps per
// epoch, each a forward and backward of the batch's mean loss (LocalGradients, the same pass as
// every other strategy). FedProx (federated.fedprox_mu = mu > 0) minimises
//   F_k(w) + mu/2 ||w - w_g||^2,
// so each step's gradient gets mu (w - w_g) added before the update (add_proximal_gradient);
// mu = 0 is FedAvg exactly (the term is not computed). The learning rate is optim.lr, constant
// ([schedule] does not apply to federated runs).
//
// Cost per client and round: E ceil(n_k / B) steps, i.e. E n_k samples through forward and
// backward; with FedProx 3N more flops per step.
//
// With E = 1 and B >= n_k the client takes one full-batch gradient step: from the same w_g that is
// the step one worker takes on the same samples (the equivalence test of
// tests/train/federated_test.cc).
#pragma once

#include <cstdint>
#include <span>

#include "dtrain/base/error.h"
#include "dtrain/data/dataset.h"
#include "dtrain/nn/model.h"
#include "dtrain/train/config.h"
#include "dtrain/train/local_gradients.h"
#include "dtrain/train/trace.h"

namespace dtrain::train {

// The injected failure of a client (federated.client_failure): its round drops it and counts it.
class ClientFailure : public Error {
 public:
  using Error::Error;
};

// grads[i] += mu (params[i] - global[i]) for i < n: the gradient of mu/2 ||w - w_g||^2.
void add_proximal_gradient(float* grads, const float* params, const float* global, std::int64_t n,
                           double mu);

struct ClientResult {
  std::int64_t samples = 0;  // n_k, the client's weight in the average
  std::int64_t steps = 0;    // local steps taken
  double loss_sum = 0.0;     // sum of the training loss over every sample of every local epoch
  std::int64_t correct = 0;  // correctly classified, over every local epoch
  std::int64_t seen = 0;     // E n_k
};

class ClientTrainer {
 public:
  // `model` is this rank's working copy, `train` the whole training set (clients hold indices
  // into it); both outlive the trainer.
  ClientTrainer(const Config& config, nn::Model& model, const data::Dataset& train);

  // Client `client`'s update in round `round` from the global parameters and buffers (the model's
  // layout): leaves the client's model in the model's store. `fail` injects a failure after the
  // first local step (ClientFailure naming the client and the round).
  ClientResult train(std::span<const std::int64_t> indices, std::span<const float> global_params,
                     std::span<const float> global_buffers, std::int64_t round, std::int64_t client,
                     bool fail);

 private:
  const Config& config_;
  nn::Model& model_;
  const data::Dataset& train_;
  TraceRecorder trace_;  // never started: clients record no trace
  LocalGradients local_;
  tensor::Tensor x_;
  std::vector<std::int32_t> y_;
};

}  // namespace dtrain::train
