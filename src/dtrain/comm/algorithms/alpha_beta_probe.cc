// measure_alpha_beta (cost_model.h): the start-up measurement behind `auto`.
//
// Pairs (2i, 2i+1) ping-pong kSmallBytes kSmallRounds times and kLargeBytes kLargeRounds times
// after one warm-up round trip of each (which also faults the buffers in), keeping the fastest
// round trip of each size. alpha = small round trip / 2; beta = (large round trip / 2 - alpha) /
// kLargeBytes, floored at 1e-12 s/byte (1 TB/s) so noise cannot make it zero or negative. The
// pairs' (alpha, beta) are summed and averaged by a binomial reduce to rank 0 and a broadcast from
// it, so every rank ends with rank 0's figures bit for bit and therefore picks the same algorithm.
#include <algorithm>
#include <array>
#include <chrono>
#include <limits>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"
#include "dtrain/comm/algorithms/cost_model.h"

namespace dtrain::comm {
namespace {

constexpr std::size_t kSmallBytes = 8;
constexpr int kSmallRounds = 20;
constexpr std::size_t kLargeBytes = std::size_t{1} << 20;
constexpr int kLargeRounds = 4;
constexpr double kMinBeta = 1e-12;
constexpr double kMinAlpha = 1e-9;

// The fastest of `rounds` round trips of `bytes` with `partner` (the lower rank of the pair sends
// first), in seconds: the minimum filters out preemption, which on an oversubscribed machine
// would otherwise dominate the small messages.
double round_trip(Channel& channel, int partner, std::vector<std::byte>& buffer, std::size_t bytes,
                  int rounds) {
  const bool first = channel.rank() < partner;
  auto once = [&] {
    if (first) {
      channel.send(partner, buffer.data(), bytes);
      channel.recv(partner, buffer.data(), bytes);
    } else {
      channel.recv(partner, buffer.data(), bytes);
      channel.send(partner, buffer.data(), bytes);
    }
  };
  once();  // warm-up
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < rounds; ++i) {
    const auto start = std::chrono::steady_clock::now();
    once();
    const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
    best = std::min(best, elapsed.count());
  }
  return best;
}

}  // namespace

AlphaBeta measure_alpha_beta(Channel& channel) {
  const int ranks = channel.size();
  const int partner = channel.rank() ^ 1;
  // (alpha, beta, pairs measured by this rank): summed over ranks at rank 0.
  std::array<double, 3> figures{0.0, 0.0, 0.0};
  if (partner < ranks) {
    std::vector<std::byte> buffer(kLargeBytes);
    const double alpha =
        std::max(kMinAlpha, round_trip(channel, partner, buffer, kSmallBytes, kSmallRounds) / 2);
    const double one_way = round_trip(channel, partner, buffer, kLargeBytes, kLargeRounds) / 2;
    const double beta = std::max(kMinBeta, (one_way - alpha) / static_cast<double>(kLargeBytes));
    figures = {alpha, beta, 1.0};
  }
  if (ranks > 1) allreduce_tree(channel, figures.data(), 3, DType::kF64, ReduceOp::kSum);
  AlphaBeta model;
  if (figures[2] > 0) {
    model.alpha = figures[0] / figures[2];
    model.beta = figures[1] / figures[2];
  }
  return model;
}

}  // namespace dtrain::comm
