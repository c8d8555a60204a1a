// Communication topologies of decentralized SGD (D-PSGD, Lian et al. 2017) and their mixing
// matrices: rank r replaces its vector by x_r <- sum_j W_rj x_j, the weighted average over its
// in-neighbours j (itself included), as neighbor_allreduce does (docs/DECENTRALIZED.md).
//
// Every W here is doubly stochastic (rows and columns sum to 1, so the average of the replicas is
// kept), with uniform weights 1 / (in-degree + 1) over a rank's distinct in-neighbours and itself:
//
//   ring                  r - 1, r + 1                          (P = 2: the other rank; P = 1:
//   none) torus                 up, down, left, right on a rows x cols grid with wrap-around; P
//   must be
//                         rows x cols with rows, cols >= 2 (rows the largest such divisor <= sqrt
//                         P); a side of 2 has up = down (or left = right), counted once
//   exponential           r +- 2^k for every 2^k < P, counted once (P = 8: 1, 2, 4, 6, 7 away)
//   one-peer-exponential  step t: the single peer r - 2^k, k = t mod ceil(log2 P), weights 1/2 and
//                         1/2 (Ying et al. 2021, BlueFog); rank r sends to r + 2^k
//   full                  every rank, weights 1/P (= allreduce average)
//
// ring, torus, exponential and full are symmetric (W = W^T: each rank sends to the ranks it
// receives from). One-peer exponential is not (except for P <= 2): it is a permutation averaged
// with the identity. For P a power of two, the product of its W over any ceil(log2 P) consecutive
// steps is exactly the average 11^T / P; for other P it is not (a peer 2^k away reaches only part
// of the ranks in a period), and the replicas approach their average geometrically instead
// (docs/DECENTRALIZED.md shows P = 6).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::comm {

enum class TopologyKind { kRing, kTorus, kExponential, kOnePeerExponential, kFull };

// "ring", "torus", "exponential", "one-peer-exponential", "full".
std::string_view topology_name(TopologyKind kind);
std::span<const TopologyKind> topology_kinds();
// The inverse of topology_name; a one-line ConfigError listing the accepted names otherwise.
TopologyKind parse_topology(std::string_view name);

// One in-neighbour of a rank and its weight W_rj in the mixing matrix.
struct Neighbor {
  int rank = 0;
  double weight = 0.0;
  bool operator==(const Neighbor&) const = default;
};

// A topology over P ranks: cheap to copy, no communication.
class Topology {
 public:
  // ConfigError naming the numbers when the kind does not exist on `ranks` (a torus on 7 ranks)
  // or ranks < 1.
  Topology(TopologyKind kind, int ranks);

  TopologyKind kind() const { return kind_; }
  std::string_view name() const { return topology_name(kind_); }
  int size() const { return ranks_; }
  // The torus grid (rows x cols = size); 0 for the other kinds.
  int rows() const { return rows_; }
  int cols() const { return cols_; }
  // One-peer exponential changes W every step, cycling with period ceil(log2 P); the others have
  // one W and period 1.
  bool time_varying() const { return kind_ == TopologyKind::kOnePeerExponential; }
  int period() const { return period_; }
  // W = W^T at every step.
  bool symmetric() const;

  // Rank r's in-neighbours at `step` (>= 0), itself included, sorted by rank, with weights W_rj
  // (they sum to 1). Cost O(degree log degree) (full: O(P)).
  std::vector<Neighbor> in_neighbors(int rank, std::int64_t step) const;
  // The ranks that have r as an in-neighbour at `step`, r excluded, sorted: where r sends its
  // vector. The same ranks as in_neighbors for symmetric topologies.
  std::vector<int> out_neighbors(int rank, std::int64_t step) const;
  // The dense mixing matrix at `step`: (P, P) row-major, W[r P + j] (for tests and docs).
  std::vector<double> mixing_matrix(std::int64_t step) const;

 private:
  // Distinct in-neighbours of r other than r, unsorted.
  std::vector<int> others(int rank, std::int64_t step) const;

  TopologyKind kind_;
  int ranks_;
  int rows_ = 0;
  int cols_ = 0;
  int period_ = 1;
};

}  // namespace dtrain::comm
