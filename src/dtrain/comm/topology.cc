#include "dtrain/comm/topology.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

#include "dtrain/base/error.h"

namespace dtrain::comm {
namespace {

constexpr std::array kKinds = {TopologyKind::kRing, TopologyKind::kTorus,
                               TopologyKind::kExponential, TopologyKind::kOnePeerExponential,
                               TopologyKind::kFull};

int modulo(std::int64_t a, int n) { return static_cast<int>(((a % n) + n) % n); }

// Rows of the torus on `ranks`: the largest divisor in [2, sqrt(ranks)] whose cofactor is >= 2
// (the squarest grid, which has the smallest diameter); 0 when there is none (ranks prime or < 4).
int torus_rows(int ranks) {
  int rows = 0;
  for (int a = 2; a * a <= ranks; ++a) {
    if (ranks % a == 0) rows = a;
  }
  return rows;
}

// ceil(log2 P) for P >= 2: the number of powers of two below P.
int powers_of_two_below(int ranks) {
  int k = 0;
  while ((std::int64_t{1} << k) < ranks) ++k;
  return k;
}

}  // namespace

std::string_view topology_name(TopologyKind kind) {
  switch (kind) {
    case TopologyKind::kRing: return "ring";
    case TopologyKind::kTorus: return "torus";
    case TopologyKind::kExponential: return "exponential";
    case TopologyKind::kOnePeerExponential: return "one-peer-exponential";
    case TopologyKind::kFull: return "full";
  }
  return "?";
}

std::span<const TopologyKind> topology_kinds() { return kKinds; }

TopologyKind parse_topology(std::string_view name) {
  for (const TopologyKind kind : kKinds) {
    if (topology_name(kind) == name) return kind;
  }
  throw ConfigError(fmt::format(
      "unknown topology '{}': expected ring, torus, exponential, one-peer-exponential or full",
      name));
}

Topology::Topology(TopologyKind kind, int ranks) : kind_(kind), ranks_(ranks) {
  if (ranks < 1) {
    throw ConfigError(
        fmt::format("topology '{}' on {} ranks: needs at least 1 rank", name(), ranks));
  }
  if (kind == TopologyKind::kTorus) {
    rows_ = torus_rows(ranks);
    if (rows_ == 0) {
      int below = ranks - 1;
      while (below >= 4 && torus_rows(below) == 0) --below;
      int above = std::max(ranks + 1, 4);
      while (torus_rows(above) == 0) ++above;
      throw ConfigError(fmt::format(
          "topology 'torus' on {} ranks: needs P = rows x cols with rows, cols >= 2, and {} has "
          "no such factorization (the nearest rank counts that do: {})",
          ranks, ranks,
          below >= 4 ? fmt::format("{} and {}", below, above) : fmt::format("{}", above)));
    }
    cols_ = ranks / rows_;
  }
  if (kind == TopologyKind::kOnePeerExponential && ranks > 1) period_ = powers_of_two_below(ranks);
}

bool Topology::symmetric() const {
  return kind_ != TopologyKind::kOnePeerExponential || ranks_ <= 2;
}

std::vector<int> Topology::others(int rank, std::int64_t step) const {
  const int p = ranks_;
  std::vector<int> ranks;
  switch (kind_) {
    case TopologyKind::kRing: ranks = {modulo(rank - 1, p), modulo(rank + 1, p)}; break;
    case TopologyKind::kTorus: {
      const int row = rank / cols_;
      const int col = rank % cols_;
      ranks = {modulo(row - 1, rows_) * cols_ + col, modulo(row + 1, rows_) * cols_ + col,
               row * cols_ + modulo(col - 1, cols_), row * cols_ + modulo(col + 1, cols_)};
      break;
    }
    case TopologyKind::kExponential:
      for (std::int64_t hop = 1; hop < p; hop *= 2) {
        ranks.push_back(modulo(rank - hop, p));
        ranks.push_back(modulo(rank + hop, p));
      }
      break;
    case TopologyKind::kOnePeerExponential:
      if (p > 1) ranks = {modulo(rank - (std::int64_t{1} << (step % period_)), p)};
      break;
    case TopologyKind::kFull:
      for (int j = 0; j < p; ++j) ranks.push_back(j);
      break;
  }
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::erase(ranks, rank);
  return ranks;
}

std::vector<Neighbor> Topology::in_neighbors(int rank, std::int64_t step) const {
  if (rank < 0 || rank >= ranks_ || step < 0) {
    throw ConfigError(fmt::format("topology '{}' on {} ranks: rank {} or step {} out of range",
                                  name(), ranks_, rank, step));
  }
  std::vector<int> ranks = others(rank, step);
  ranks.insert(std::lower_bound(ranks.begin(), ranks.end(), rank), rank);
  const double weight = 1.0 / static_cast<double>(ranks.size());
  std::vector<Neighbor> neighbors;
  neighbors.reserve(ranks.size());
  for (const int j : ranks) neighbors.push_back(Neighbor{j, weight});
  return neighbors;
}

std::vector<int> Topology::out_neighbors(int rank, std::int64_t step) const {
  if (rank < 0 || rank >= ranks_ || step < 0) {
    throw ConfigError(fmt::format("topology '{}' on {} ranks: rank {} or step {} out of range",
                                  name(), ranks_, rank, step));
  }
  if (kind_ != TopologyKind::kOnePeerExponential) return others(rank, step);
  if (ranks_ == 1) return {};
  return {modulo(rank + (std::int64_t{1} << (step % period_)), ranks_)};
}

std::vector<double> Topology::mixing_matrix(std::int64_t step) const {
  const auto p = static_cast<std::size_t>(ranks_);
  std::vector<double> w(p * p, 0.0);
  for (int r = 0; r < ranks_; ++r) {
    for (const Neighbor& n : in_neighbors(r, step)) {
      w[static_cast<std::size_t>(r) * p + static_cast<std::size_t>(n.rank)] = n.weight;
    }
  }
  return w;
}

}  // namespace dtrain::comm
