// Who trains in a federated round and where (docs/FEDERATED.md): each round the server samples
// m = max(1, floor(C K)) of the K clients without replacement (McMahan et al. 2017's fraction C),
// and the simulation spreads them over the P ranks round-robin, participant j to rank j mod P, so
// every rank runs floor(m / P) or ceil(m / P) clients one after another. An injected client
// failure (federated.client_failure = q) is a seeded coin per (round, client): the client then
// fails after its first local step, as a device that drops out mid-round.
//
// Everything is a pure function of (seed, round), so every rank computes the same plan without
// communicating. Cost: O(K) draws per round.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::train {

// m = max(1, floor(C K)) for a fraction C in (0, 1] (floor(C K + 1e-9): 0.1 x 30 is 3, not 2).
std::int64_t clients_per_round(std::int64_t clients, double fraction);

// The participants of round `round` (0-based): m distinct clients of [0, clients), ascending.
std::vector<std::int64_t> sample_round_clients(std::int64_t clients, std::int64_t m,
                                               std::uint64_t seed, std::int64_t round);

// The participants that rank `rank` of `ranks` runs: participants[j] for j = rank, rank + P, ...
std::vector<std::int64_t> rank_clients(const std::vector<std::int64_t>& participants, int rank,
                                       int ranks);

// Whether client `client` fails in round `round` when each fails with probability `probability`.
bool client_fails(double probability, std::uint64_t seed, std::int64_t round, std::int64_t client);

}  // namespace dtrain::train
