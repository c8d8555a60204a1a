// The server's side of FedAvg (McMahan et al. 2017, Algorithm 1): the new global model is the
// participants' models weighted by their sample counts,
//   w_g <- sum_k n_k w_k / sum_k n_k      over the clients k that completed the round,
// and the same for non-trained buffers (batch-norm running statistics). In the simulation each
// rank adds up n_k w_k over the clients it ran, and one allreduce (sum) over the ranks makes the
// server's sum; the sums are f64 so that the order of the additions (which ranks ran which clients)
// changes the average by rounding of f64, not of f32, and one client's average is its model
// bitwise (n w / n in f64 is exact for f32 w).
//
// The round's counters (completed and failed clients, samples, loss and accuracy sums, steps) ride
// in the same allreduce, behind the model: 8 (N + B + kCounters) bytes per rank and round in, the
// algorithm's factor out (ring: 2 (P-1)/P of that sent per rank).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/comm/communicator.h"

namespace dtrain::train {

// What a round counts, summed over the ranks by FederatedAverage::allreduce.
struct RoundCounts {
  double completed = 0.0;  // participants that sent their model
  double failed = 0.0;     // participants dropped (an injected failure)
  double samples = 0.0;    // sum of n_k over the completed: the average's denominator
  double seen = 0.0;       // samples trained on, E n_k summed
  double loss_sum = 0.0;   // training loss summed over `seen`
  double correct = 0.0;    // correctly classified of `seen`
  double steps = 0.0;      // local steps, summed over the completed
  double stop = 0.0;       // ranks that saw a stop signal (SIGTERM, SIGINT) during the round
};

class FederatedAverage {
 public:
  // A model of `params` trained values and `buffers` non-trained ones.
  FederatedAverage(std::int64_t params, std::int64_t buffers);

  // Starts a round: sums and counts to zero.
  void reset();
  // Adds client weight n_k = `samples` times its model (params, buffers of the sizes above).
  void add(std::int64_t samples, std::span<const float> params, std::span<const float> buffers);
  RoundCounts& counts() { return counts_; }
  const RoundCounts& counts() const { return counts_; }

  // Sums the sums and counts over the ranks of `comm` (collective; nothing when comm is null).
  void allreduce(comm::Communicator* comm);

  // params, buffers <- sums / counts().samples; false (and nothing written) when no participant
  // completed the round: the global model stays as it was.
  bool average_into(std::span<float> params, std::span<float> buffers) const;

  // Values one allreduce carries: N + B + the counters.
  std::int64_t reduced_values() const { return static_cast<std::int64_t>(sums_.size()); }

 private:
  std::int64_t params_;
  std::int64_t buffers_;
  std::vector<double> sums_;  // N params, then B buffers, then the counters while reducing
  RoundCounts counts_;
};

}  // namespace dtrain::train
