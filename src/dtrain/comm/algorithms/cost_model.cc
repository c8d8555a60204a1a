#include "dtrain/comm/algorithms/cost_model.h"

#include <array>
#include <cmath>
#include <limits>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {
namespace {

constexpr std::array<std::string_view, 6> kCandidates{
    "ring", "halving-doubling", "double-binary-tree", "tree", "sharded-ps", "parameter-server"};

double ceil_log2(int n) {
  int bits = 0;
  while ((1 << bits) < n) ++bits;
  return bits;
}

double ring_cost(double p, double n, const AlphaBeta& m, double s) {
  if (p <= 1 || n <= 0) return 0.0;
  return 2 * (p - 1) * std::ceil(n / (p * s)) * m.alpha + 2 * (p - 1) / p * n * m.beta;
}

}  // namespace

double allreduce_cost(std::string_view algorithm, int ranks, double bytes, const AlphaBeta& model,
                      std::size_t segment_bytes, int local_size) {
  const double p = ranks;
  const double n = bytes;
  const double s = static_cast<double>(segment_bytes);
  const double a = model.alpha;
  const double b = model.beta;
  const bool known = algorithm == "ring" || algorithm == "parameter-server" ||
                     algorithm == "sharded-ps" || algorithm == "tree" ||
                     algorithm == "halving-doubling" || algorithm == "double-binary-tree" ||
                     algorithm == "hierarchical";
  if (!known) {
    throw ConfigError(fmt::format(
        "allreduce cost model: no formula for '{}' (it has one for ring, parameter-server, "
        "sharded-ps, tree, halving-doubling, double-binary-tree, hierarchical)",
        algorithm));
  }
  if (ranks <= 1 || bytes <= 0) return 0.0;
  if (algorithm == "ring") return ring_cost(p, n, model, s);
  if (algorithm == "parameter-server") return 2 * (p - 1) * (a + n * b);
  if (algorithm == "sharded-ps") return 2 * (p - 1) * a + 2 * (p - 1) / p * n * b;
  if (algorithm == "tree") return 2 * ceil_log2(ranks) * (a + n * b);
  if (algorithm == "halving-doubling") {
    int power = 1;
    while (power * 2 <= ranks) power *= 2;
    const double q = power;
    const double fold = power == ranks ? 0.0 : 2 * (a + n * b);
    if (n <= static_cast<double>(kRecursiveDoublingBytes)) {
      return std::log2(q) * (a + n * b) + fold;  // recursive doubling of the whole buffer
    }
    return 2 * std::log2(q) * a + 2 * (q - 1) / q * n * b + fold;
  }
  if (algorithm == "double-binary-tree") {
    const double segments = std::max(1.0, std::ceil(n / (2 * s)));
    return 2 * (ceil_log2(ranks) + segments - 1) * a + (ranks == 2 ? 1 : 2) * n * b;
  }
  // hierarchical
  const int group = local_size <= 0 || local_size >= ranks ? ranks : local_size;
  const int leaders = (ranks + group - 1) / group;
  return 2 * ceil_log2(group) * (a + n * b) + ring_cost(leaders, n, model, s);
}

std::span<const std::string_view> auto_allreduce_candidates() { return kCandidates; }

std::string_view choose_allreduce(int ranks, double bytes, const AlphaBeta& model,
                                  std::size_t segment_bytes) {
  std::string_view best = kCandidates.front();
  double best_cost = std::numeric_limits<double>::infinity();
  for (std::string_view candidate : kCandidates) {
    const double cost = allreduce_cost(candidate, ranks, bytes, model, segment_bytes);
    if (cost < best_cost) {
      best = candidate;
      best_cost = cost;
    }
  }
  return best;
}

}  // namespace dtrain::comm
