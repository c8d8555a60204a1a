#include "dtrain/train/strategies/federated/round_plan.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::train {
namespace {

// rng_stream purposes of the rounds' draws.
constexpr std::uint64_t kSamplePurpose = 0xFED1'0001;
constexpr std::uint64_t kFailurePurpose = 0xFED1'0002;

}  // namespace

std::int64_t clients_per_round(std::int64_t clients, double fraction) {
  DTRAIN_CHECK(fraction > 0.0 && fraction <= 1.0, "client fraction {} outside (0, 1]", fraction);
  const auto m =
      static_cast<std::int64_t>(std::floor(fraction * static_cast<double>(clients) + 1e-9));
  return std::clamp<std::int64_t>(m, 1, clients);
}

std::vector<std::int64_t> sample_round_clients(std::int64_t clients, std::int64_t m,
                                               std::uint64_t seed, std::int64_t round) {
  DTRAIN_CHECK(m >= 1 && m <= clients, "{} participants of {} clients", m, clients);
  // A partial Fisher-Yates shuffle: its first m entries are a uniform sample without replacement.
  std::vector<std::int64_t> all(static_cast<std::size_t>(clients));
  std::iota(all.begin(), all.end(), std::int64_t{0});
  Rng rng(seed, rng_stream(kSamplePurpose, static_cast<std::uint64_t>(round)));
  for (std::int64_t i = 0; i < m; ++i) {
    const auto j =
        i + static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(clients - i)));
    std::swap(all[static_cast<std::size_t>(i)], all[static_cast<std::size_t>(j)]);
  }
  all.resize(static_cast<std::size_t>(m));
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<std::int64_t> rank_clients(const std::vector<std::int64_t>& participants, int rank,
                                       int ranks) {
  DTRAIN_CHECK(rank >= 0 && rank < ranks, "rank {} of {}", rank, ranks);
  std::vector<std::int64_t> mine;
  for (std::size_t j = static_cast<std::size_t>(rank); j < participants.size();
       j += static_cast<std::size_t>(ranks)) {
    mine.push_back(participants[j]);
  }
  return mine;
}

bool client_fails(double probability, std::uint64_t seed, std::int64_t round, std::int64_t client) {
  if (probability <= 0.0) return false;
  Rng rng(seed, rng_stream(kFailurePurpose, static_cast<std::uint64_t>(round),
                           static_cast<std::uint64_t>(client)));
  return static_cast<double>(rng.uniform()) < probability;
}

}  // namespace dtrain::train
