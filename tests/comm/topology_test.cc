// Topologies of decentralized SGD: every mixing matrix is doubly stochastic, symmetric where the
// topology says so, and matches its neighbour lists; each kind against its definition; one-peer
// exponential averages exactly over a period when P is a power of two; bad rank counts and names
// are one-line errors with the numbers.
#include "dtrain/comm/topology.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::comm {
namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool exists(TopologyKind kind, int ranks) {
  try {
    Topology(kind, ranks);
    return true;
  } catch (const ConfigError&) {
    return false;
  }
}

// (P, P) row-major product a b.
std::vector<double> multiply(const std::vector<double>& a, const std::vector<double>& b, int p) {
  std::vector<double> c(a.size(), 0.0);
  for (int i = 0; i < p; ++i) {
    for (int k = 0; k < p; ++k) {
      for (int j = 0; j < p; ++j) c[i * p + j] += a[i * p + k] * b[k * p + j];
    }
  }
  return c;
}

double distance_to_average(const std::vector<double>& w, int p) {
  double worst = 0.0;
  for (const double x : w) worst = std::max(worst, std::abs(x - 1.0 / p));
  return worst;
}

TEST(TopologyTest, NamesRoundTripAndAnUnknownNameListsTheAcceptedOnes) {
  for (const TopologyKind kind : topology_kinds()) {
    EXPECT_EQ(parse_topology(topology_name(kind)), kind);
  }
  EXPECT_EQ(topology_kinds().size(), 5u);
  try {
    parse_topology("star");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    const std::string message = e.what();
    EXPECT_TRUE(contains(message, "'star'")) << message;
    EXPECT_TRUE(contains(message, "ring, torus, exponential, one-peer-exponential or full"))
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos);
  }
}

TEST(TopologyTest, EveryMixingMatrixIsDoublyStochasticAndMatchesTheNeighbourLists) {
  for (const TopologyKind kind : topology_kinds()) {
    for (int p = 1; p <= 17; ++p) {
      if (!exists(kind, p)) continue;
      const Topology topology(kind, p);
      for (std::int64_t step = 0; step < 2 * topology.period() + 1; ++step) {
        const std::string where = std::string(topology.name()) + " P=" + std::to_string(p) +
                                  " step " + std::to_string(step);
        const std::vector<double> w = topology.mixing_matrix(step);
        for (int i = 0; i < p; ++i) {
          double row = 0.0;
          double col = 0.0;
          for (int j = 0; j < p; ++j) {
            EXPECT_GE(w[i * p + j], 0.0) << where;
            row += w[i * p + j];
            col += w[j * p + i];
            if (topology.symmetric()) {
              EXPECT_EQ(w[i * p + j], w[j * p + i]) << where;
            }
          }
          EXPECT_NEAR(row, 1.0, 1e-12) << where << " row " << i;
          EXPECT_NEAR(col, 1.0, 1e-12) << where << " column " << i;
          EXPECT_GT(w[i * p + i], 0.0) << where << ": every rank keeps part of its own vector";
        }
        for (int r = 0; r < p; ++r) {
          const std::vector<Neighbor> in = topology.in_neighbors(r, step);
          EXPECT_TRUE(
              std::is_sorted(in.begin(), in.end(),
                             [](const Neighbor& a, const Neighbor& b) { return a.rank < b.rank; }))
              << where;
          std::vector<Neighbor> from_matrix;
          std::vector<int> senders_to;
          for (int j = 0; j < p; ++j) {
            if (w[r * p + j] > 0) from_matrix.push_back(Neighbor{j, w[r * p + j]});
            if (j != r && w[j * p + r] > 0) senders_to.push_back(j);
          }
          EXPECT_EQ(in, from_matrix) << where << " rank " << r;
          EXPECT_EQ(topology.out_neighbors(r, step), senders_to) << where << " rank " << r;
        }
      }
    }
  }
}

TEST(TopologyTest, RingIsSelfAndTwoNeighboursAtOneThird) {
  EXPECT_EQ(Topology(TopologyKind::kRing, 1).mixing_matrix(0), std::vector<double>{1.0});
  EXPECT_EQ(Topology(TopologyKind::kRing, 2).mixing_matrix(0),
            (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  const Topology ring(TopologyKind::kRing, 5);
  EXPECT_EQ(ring.in_neighbors(0, 0),
            (std::vector<Neighbor>{{0, 1.0 / 3}, {1, 1.0 / 3}, {4, 1.0 / 3}}));
  EXPECT_EQ(ring.out_neighbors(2, 7), (std::vector<int>{1, 3}));
}

TEST(TopologyTest, TorusIsTheSquarestGridAndNeedsAFactorization) {
  const Topology nine(TopologyKind::kTorus, 9);
  EXPECT_EQ(nine.rows(), 3);
  EXPECT_EQ(nine.cols(), 3);
  // Rank 4 is the centre of the 3 x 3 grid: up 1, down 7, left 3, right 5.
  EXPECT_EQ(nine.in_neighbors(4, 0),
            (std::vector<Neighbor>{{1, 0.2}, {3, 0.2}, {4, 0.2}, {5, 0.2}, {7, 0.2}}));
  // Rank 0 wraps around: up 6, left 2.
  EXPECT_EQ(nine.out_neighbors(0, 0), (std::vector<int>{1, 2, 3, 6}));
  const Topology twelve(TopologyKind::kTorus, 12);
  EXPECT_EQ(twelve.rows(), 3);
  EXPECT_EQ(twelve.cols(), 4);
  // 2 x 4: up and down are the same rank, counted once.
  const Topology eight(TopologyKind::kTorus, 8);
  EXPECT_EQ(eight.rows(), 2);
  EXPECT_EQ(eight.in_neighbors(0, 0),
            (std::vector<Neighbor>{{0, 0.25}, {1, 0.25}, {3, 0.25}, {4, 0.25}}));
  for (const int p : {1, 2, 3, 5, 7, 11, 13}) {
    try {
      Topology(TopologyKind::kTorus, p);
      FAIL() << "torus on " << p << " ranks";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_TRUE(contains(message, "on " + std::to_string(p) + " ranks")) << message;
      EXPECT_TRUE(contains(message, "rows x cols with rows, cols >= 2")) << message;
    }
  }
  try {
    Topology(TopologyKind::kTorus, 7);
  } catch (const ConfigError& e) {
    EXPECT_TRUE(contains(e.what(), "nearest rank counts that do: 6 and 8")) << e.what();
  }
}

TEST(TopologyTest, ExponentialConnectsPlusAndMinusPowersOfTwo) {
  const Topology eight(TopologyKind::kExponential, 8);
  // 0 +- 1, 2, 4 mod 8 = {1, 7, 2, 6, 4}, and itself: 6 at 1/6.
  std::vector<Neighbor> expect;
  for (const int j : {0, 1, 2, 4, 6, 7}) expect.push_back(Neighbor{j, 1.0 / 6});
  EXPECT_EQ(eight.in_neighbors(0, 0), expect);
  EXPECT_EQ(eight.out_neighbors(3, 0), (std::vector<int>{1, 2, 4, 5, 7}));
  EXPECT_EQ(Topology(TopologyKind::kExponential, 3).out_neighbors(0, 0), (std::vector<int>{1, 2}));
}

TEST(TopologyTest, OnePeerExponentialCyclesThroughThePowersOfTwo) {
  const Topology eight(TopologyKind::kOnePeerExponential, 8);
  EXPECT_EQ(eight.period(), 3);
  EXPECT_TRUE(eight.time_varying());
  EXPECT_FALSE(eight.symmetric());
  for (std::int64_t step = 0; step < 7; ++step) {
    const int hop = 1 << (step % 3);
    EXPECT_EQ(eight.in_neighbors(5, step), (std::vector<Neighbor>{{5 - hop, 0.5}, {5, 0.5}}))
        << "step " << step;
    EXPECT_EQ(eight.out_neighbors(5, step), std::vector<int>{(5 + hop) % 8}) << "step " << step;
  }
  EXPECT_EQ(Topology(TopologyKind::kOnePeerExponential, 1).out_neighbors(0, 3), std::vector<int>{});
  EXPECT_EQ(Topology(TopologyKind::kOnePeerExponential, 2).mixing_matrix(5),
            (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  EXPECT_EQ(Topology(TopologyKind::kOnePeerExponential, 6).period(), 3);  // hops 1, 2, 4
}

TEST(TopologyTest, OnePeerExponentialAveragesExactlyOverAPeriodOnlyForPowersOfTwo) {
  for (int p = 2; p <= 16; ++p) {
    const Topology topology(TopologyKind::kOnePeerExponential, p);
    // Any period's worth of consecutive steps, starting anywhere in the cycle.
    for (std::int64_t start = 0; start < topology.period(); ++start) {
      std::vector<double> product = topology.mixing_matrix(start);
      for (std::int64_t step = start + 1; step < start + topology.period(); ++step) {
        product = multiply(topology.mixing_matrix(step), product, p);
      }
      const bool power_of_two = (p & (p - 1)) == 0;
      if (power_of_two) {
        EXPECT_LT(distance_to_average(product, p), 1e-12) << "P=" << p << " start " << start;
      } else {
        EXPECT_GT(distance_to_average(product, p), 1e-3) << "P=" << p << " start " << start;
      }
    }
    // Either way the replicas approach their average: 20 periods leave little.
    std::vector<double> product = topology.mixing_matrix(0);
    for (std::int64_t step = 1; step < 20 * topology.period(); ++step) {
      product = multiply(topology.mixing_matrix(step), product, p);
    }
    EXPECT_LT(distance_to_average(product, p), 1e-3) << "P=" << p;
  }
}

TEST(TopologyTest, FullIsTheAverage) {
  for (int p = 1; p <= 9; ++p) {
    const std::vector<double> w = Topology(TopologyKind::kFull, p).mixing_matrix(0);
    for (const double x : w) EXPECT_DOUBLE_EQ(x, 1.0 / p) << "P=" << p;
  }
}

TEST(TopologyTest, BadRanksAndStepsAreConfigErrors) {
  EXPECT_THROW(Topology(TopologyKind::kRing, 0), ConfigError);
  const Topology ring(TopologyKind::kRing, 4);
  EXPECT_THROW(ring.in_neighbors(4, 0), ConfigError);
  EXPECT_THROW(ring.out_neighbors(-1, 0), ConfigError);
  EXPECT_THROW(ring.in_neighbors(0, -1), ConfigError);
}

}  // namespace
}  // namespace dtrain::comm
