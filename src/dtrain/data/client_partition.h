// How a training set is cut into the data of K federated clients (docs/FEDERATED.md): which
// samples each client holds. Three ways, as the federated-learning papers use them:
//
//   "iid"            the epoch-0 shuffle of all N samples cut into K contiguous runs of N/K
//                    (client k: [k N / K, (k + 1) N / K) of the shuffle; sizes differ by at most
//                    one). Every client sees every class about equally.
//   "shards" /       McMahan et al. 2017's pathological non-IID split: the samples sorted by label
//   "shards:S"       (stable, so ties keep index order), cut into S K equal shards (shard s:
//                    [s N / (S K), (s + 1) N / (S K)) of the sorted order), and each client given S
//                    shards drawn without replacement; S = 2 by default, so most clients hold
//                    two classes.
//   "dirichlet:A"    label skew of Hsu et al. 2019 / Wang et al. 2020: for each class c a vector
//                    p_c ~ Dirichlet(A, ..., A) over the K clients, and the class's samples (in
//                    shuffled order) cut at the cumulative proportions of p_c. Small A (0.1) gives
//                    each client a few classes and very unequal sizes; large A approaches IID. A
//                    draw that leaves a client without samples is redrawn from the next stream
//                    (as NIID-bench redraws until a minimum size holds), at most kMaxRedraws
//                    times; `redraws` says how many it took.
//
// Every draw comes from the counter-based Rng(seed, stream(purpose, ...)) of base/rng.h, so a
// partition is a pure function of (labels, K, spec, seed): every rank computes the same one without
// communicating. Cost: O(N log N) for the sort of "shards", O(N + K C) draws otherwise.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/base/rng.h"

namespace dtrain::data {

enum class PartitionKind { kIid, kShards, kDirichlet };

struct PartitionSpec {
  PartitionKind kind = PartitionKind::kIid;
  std::int64_t shards_per_client = 2;  // kShards: S
  double alpha = 0.0;                  // kDirichlet: the concentration A > 0
};

// Parses "iid", "shards", "shards:S" (S >= 1) or "dirichlet:A" (A > 0); ConfigError naming the
// text, the number and the accepted forms otherwise ("dirichlet:0": alpha = 0 must be > 0).
PartitionSpec parse_partition(std::string_view text);
// The canonical text of `spec` ("dirichlet:0.1").
std::string partition_name(const PartitionSpec& spec);

struct ClientPartition {
  // clients[k]: the indices into the training set that client k holds, ascending.
  std::vector<std::vector<std::int64_t>> clients;
  int redraws = 0;  // kDirichlet: draws thrown away because a client got no sample

  std::int64_t clients_count() const { return static_cast<std::int64_t>(clients.size()); }
  // n_k for every client.
  std::vector<std::int64_t> sizes() const;
};

// The draws a Dirichlet partition may throw away before it gives up.
inline constexpr int kMaxRedraws = 100;

// Cuts samples 0 .. labels.size()-1 (one label each, in [0, classes)) into `clients` clients as
// `spec` says. ConfigError with the numbers when clients < 1, when there are more clients than
// samples (each client needs one), when "shards" asks for more shards than samples, or when a
// Dirichlet split leaves a client empty after kMaxRedraws draws.
ClientPartition partition_clients(std::span<const std::int32_t> labels, std::int64_t classes,
                                  std::int64_t clients, const PartitionSpec& spec,
                                  std::uint64_t seed);

// histogram[k][c]: how many samples of class c client k holds.
std::vector<std::vector<std::int64_t>> label_histogram(const ClientPartition& partition,
                                                       std::span<const std::int32_t> labels,
                                                       std::int64_t classes);

// A Gamma(shape, 1) variate drawn from `rng` (Marsaglia and Tsang 2000; shape < 1 by the boost
// Gamma(shape + 1) x U^(1/shape)); exposed for its test. shape > 0.
double gamma_variate(double shape, Rng& rng);

}  // namespace dtrain::data
