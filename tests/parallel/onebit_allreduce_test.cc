// 1-bit Adam's exchange (onebit_allreduce.h, reducers/onebit_adam_reducer.h), ranks as threads:
// the compressed allreduce equals its algorithm done by hand (worker error feedback, chunks through
// the sign codec, the server's average and its own error feedback) bit for bit for P = 1..5 and
// odd sizes; its bytes are 2 (P-1) (4 + c/8) per rank by the communicator's counters; error
// feedback makes the running mean of its outputs the true average; the reducer's warm-up is
// allreduce + Adam bit for bit, after which only the 1-bit momentum moves; and 1-bit Adam solves
// a least-squares problem split over two ranks.
#include "dtrain/parallel/onebit_allreduce.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/compress/sign_codec.h"
#include "dtrain/optim/onebit_adam.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"
#include "dtrain/parallel/reducers/onebit_adam_reducer.h"
#include "random_values.h"
#include "reducer_fixture.h"

namespace dtrain::parallel {
namespace {

std::vector<float> input(int rank, int call, std::int64_t n) {
  return testing::random_values(n, 300 + 17 * rank + call);
}

// Every rank's outputs of `calls` averages.
std::vector<std::vector<std::vector<float>>> run(int ranks, std::int64_t n, int calls) {
  std::vector<std::vector<std::vector<float>>> out(static_cast<std::size_t>(ranks));
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    OneBitAllreduce allreduce(comm, n);
    for (int call = 0; call < calls; ++call) {
      std::vector<float> x = input(comm.rank(), call, n);
      allreduce.average(x.data());
      out[static_cast<std::size_t>(comm.rank())].push_back(x);
    }
  });
  return out;
}

// The algorithm of onebit_allreduce.h by hand, one rank after the other.
std::vector<std::vector<float>> by_hand(int ranks, std::int64_t n, int calls) {
  const compress::SignCodec codec;
  const std::int64_t c = OneBitAllreduce::chunk_elements(n, ranks);
  const auto first = [&](int j) { return std::min(n, c * j); };
  const auto count = [&](int j) { return std::min(n, first(j) + c) - first(j); };
  std::vector<compress::ErrorFeedback> workers(static_cast<std::size_t>(ranks),
                                               compress::ErrorFeedback(n));
  std::vector<compress::ErrorFeedback> servers(static_cast<std::size_t>(ranks),
                                               compress::ErrorFeedback(c));
  std::vector<float> scratch(static_cast<std::size_t>(c));
  std::vector<std::vector<float>> out;
  for (int call = 0; call < calls; ++call) {
    // payloads[r][j]: rank r's chunk j.
    std::vector<std::vector<std::vector<std::uint8_t>>> payloads(static_cast<std::size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> x = input(r, call, n);
      for (int j = 0; j < ranks; ++j) {
        std::vector<std::uint8_t> payload(codec.encoded_bytes(count(j)));
        if (count(j) > 0) {
          workers[r].encode(codec, first(j), x.data() + first(j), count(j), payload.data(), 0,
                            scratch.data());
        }
        payloads[r].push_back(payload);
      }
    }
    std::vector<float> result(static_cast<std::size_t>(n));
    for (int j = 0; j < ranks; ++j) {
      if (count(j) == 0) continue;
      std::vector<float> average(static_cast<std::size_t>(count(j)), 0.0f);
      for (int r = 0; r < ranks; ++r)
        codec.decode_add(payloads[r][j].data(), count(j), average.data(), 0);
      for (float& v : average) v *= 1.0f / static_cast<float>(ranks);
      std::vector<std::uint8_t> served(codec.encoded_bytes(count(j)));
      servers[j].encode(codec, 0, average.data(), count(j), served.data(), 0, scratch.data());
      codec.decode(served.data(), count(j), result.data() + first(j), 0);
    }
    out.push_back(result);
  }
  return out;
}

TEST(OneBitAllreduce, EqualsTheAlgorithmByHand) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    for (std::int64_t n : {1, 13, 1001}) {
      const auto got = run(ranks, n, 3);
      const auto want = by_hand(ranks, n, 3);
      for (int r = 0; r < ranks; ++r) {
        for (int call = 0; call < 3; ++call) {
          ASSERT_EQ(got[r][call], want[call])
              << "P=" << ranks << " n=" << n << " rank " << r << " call " << call;
        }
      }
    }
  }
}

TEST(OneBitAllreduce, SendsTwoPMinusOnePayloadsOfAScaleAndOneBitPerElement) {
  const std::int64_t n = 1001;
  for (int ranks : {2, 3, 5}) {
    const std::int64_t c = (n + ranks - 1) / ranks;
    const std::int64_t payload = 4 + (c + 7) / 8;  // c rounded up to 8 elements
    EXPECT_EQ(OneBitAllreduce::payload_bytes(n, ranks), payload);
    comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
      OneBitAllreduce allreduce(comm, n);
      std::vector<float> x = input(comm.rank(), 0, n);
      allreduce.average(x.data());
      EXPECT_EQ(comm.stats().get("alltoall").bytes_sent, (ranks - 1) * payload);
      EXPECT_EQ(comm.stats().get("allgather").bytes_sent, (ranks - 1) * payload);
      EXPECT_EQ(comm.stats().get("allreduce").bytes_sent, 0);
    });
    EXPECT_EQ(OneBitAllreduce::bytes_sent(n, ranks), 2 * (ranks - 1) * payload);
  }
}

TEST(OneBitAllreduce, ErrorFeedbackMakesTheRunningMeanTheTrueAverage) {
  // Constant inputs: each call alone is off by the sign codec's error (tens of percent), but what
  // a call leaves out the next ones send, so the mean over T calls is off by O(1/T).
  const int ranks = 3, calls = 400;
  const std::int64_t n = 64;
  std::vector<double> truth(n, 0.0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> x = input(r, 0, n);
    for (std::int64_t i = 0; i < n; ++i) truth[i] += x[i] / ranks;
  }
  std::vector<double> mean(n, 0.0);
  double first_error = 0.0;
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    OneBitAllreduce allreduce(comm, n);
    for (int call = 0; call < calls; ++call) {
      std::vector<float> x = input(comm.rank(), 0, n);
      allreduce.average(x.data());
      if (comm.rank() != 0) continue;
      for (std::int64_t i = 0; i < n; ++i) {
        mean[i] += x[i] / calls;
        if (call == 0) first_error = std::max(first_error, std::fabs(x[i] - truth[i]));
      }
    }
  });
  double error = 0.0;
  for (std::int64_t i = 0; i < n; ++i) error = std::max(error, std::fabs(mean[i] - truth[i]));
  EXPECT_GT(first_error, 0.1);
  EXPECT_LT(error, 0.02);
}

// The reducer over the small MLP (149 parameters, two buckets): W warm-up steps of allreduce +
// Adam (bitwise those of the plain allreduce reducer with optim.name = adam), then steps whose
// only traffic is the 1-bit momentum's.
TEST(OneBitAdamReducer, WarmUpIsAllreduceAndAdamThenOnlyTheOneBitMomentumMoves) {
  constexpr std::int64_t kFreeze = 2;
  for (int ranks : {2, 3}) {
    std::vector<std::vector<float>> onebit_params(ranks), adam_params(ranks);
    for (bool onebit : {true, false}) {
      comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
        auto model = testing::small_mlp();
        nn::ParamStore& store = model->store();
        const std::vector<GradientBucket> buckets = testing::bare_buckets({100, 49});
        ASSERT_EQ(testing::total(buckets), store.num_params());
        auto reducer = onebit
                           ? onebit_adam_reducer(kFreeze)(ReducerContext{comm, *model, buckets, {}})
                           : allreduce_reducer()(ReducerContext{comm, *model, buckets, {}});
        optim::OptimizerConfig config;
        config.name = onebit ? "onebit_adam" : "adam";
        config.freeze_step = kFreeze;
        auto optimizer = optim::make_optimizer(config, reducer->update_segments());
        const std::int64_t steps = onebit ? kFreeze + 2 : kFreeze;
        for (std::int64_t step = 0; step < steps; ++step) {
          const comm::OpStats before_allreduce = comm.stats().get("allreduce");
          const std::int64_t before_1bit =
              comm.stats().get("alltoall").bytes_sent + comm.stats().get("allgather").bytes_sent;
          const std::vector<float> g =
              testing::random_values(store.num_params(), 40 + 10 * comm.rank() + step);
          std::copy(g.begin(), g.end(), store.grads());
          for (const GradientBucket& b : buckets) reducer->reduce(b, store.grads() + b.offset);
          reducer->update(*optimizer, 0.01);
          const std::int64_t allreduced =
              comm.stats().get("allreduce").bytes_sent - before_allreduce.bytes_sent;
          const std::int64_t one_bit = comm.stats().get("alltoall").bytes_sent +
                                       comm.stats().get("allgather").bytes_sent - before_1bit;
          if (step < kFreeze) {
            EXPECT_GT(allreduced, 0);
            EXPECT_EQ(one_bit, 0);
          } else {
            EXPECT_EQ(allreduced, 0);
            EXPECT_EQ(one_bit, OneBitAllreduce::bytes_sent(store.num_params(), ranks));
          }
          if (step + 1 == kFreeze) {
            auto& out = onebit ? onebit_params : adam_params;
            out[comm.rank()].assign(store.params(), store.params() + store.num_params());
          }
        }
        if (onebit) {
          // The frozen steps leave every rank with the same parameters.
          std::vector<float> p(store.params(), store.params() + store.num_params());
          std::vector<float> p0 = p;
          comm.broadcast(p0.data(), std::ssize(p0), DType::kF32, 0);
          EXPECT_EQ(p, p0) << "rank " << comm.rank();
        }
      });
    }
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(onebit_params[r], adam_params[r]) << "P=" << ranks << " rank " << r;
    }
  }
}

// min over x of the mean over two ranks of ||A_r x - b_r||^2 / (2 m), b_r = A_r x*: 1-bit Adam
// (100 exact steps, then 1-bit momentum) ends within 2% of x*, from 100% at x = 0.
TEST(OneBitAdam, SolvesALeastSquaresProblemSplitOverTwoRanks) {
  constexpr std::int64_t d = 40, m = 60;
  constexpr int kSteps = 600;
  const std::vector<float> target = testing::random_values(d, 99);
  double norm = 0.0;
  for (float v : target) norm += v * v;
  norm = std::sqrt(norm);
  std::vector<double> distance(2);
  for (bool compressed : {true, false}) {
    comm::spawn_ranks(2, [&](comm::Communicator& comm) {
      const std::vector<float> a = testing::random_values(m * d, 7 + comm.rank());
      std::vector<float> b(m, 0.0f);
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < d; ++j) b[i] += a[i * d + j] * target[j];
      }
      optim::OptimizerConfig config;
      config.name = "onebit_adam";
      config.freeze_step = compressed ? 100 : kSteps;
      optim::OneBitAdam adam(config, {{"x", 0, d, false}});
      OneBitAllreduce allreduce(comm, d);
      std::vector<float> x(d, 0.0f), g(d);
      for (int step = 0; step < kSteps; ++step) {
        std::fill(g.begin(), g.end(), 0.0f);
        for (std::int64_t i = 0; i < m; ++i) {
          float residual = -b[i];
          for (std::int64_t j = 0; j < d; ++j) residual += a[i * d + j] * x[j];
          // This rank's share of the mean over both ranks' rows.
          for (std::int64_t j = 0; j < d; ++j) g[j] += residual * a[i * d + j] / (2 * m);
        }
        const double lr = step < kSteps / 2 ? 0.02 : 0.002;
        if (!adam.frozen()) {
          comm.allreduce(g.data(), d, DType::kF32, comm::ReduceOp::kSum);
          adam.step(x.data(), g.data(), lr);
        } else {
          adam.step(x.data(), g.data(), lr, 2.0f,
                    [&](std::span<float> momentum) { allreduce.average(momentum.data()); });
        }
      }
      if (comm.rank() != 0) return;
      double diff = 0.0;
      for (std::int64_t j = 0; j < d; ++j) diff += (x[j] - target[j]) * (x[j] - target[j]);
      distance[compressed ? 0 : 1] = std::sqrt(diff) / norm;
    });
  }
  // Measured: exact Adam 4.5e-6, 1-bit Adam 4.6e-3 (from 1 at x = 0); 1-bit Adam with only 5
  // exact steps ends at 0.046: a variance frozen while the gradients are still large slows the end.
  EXPECT_LT(distance[1], 1e-3) << "exact Adam";
  EXPECT_LT(distance[0], 0.02) << "1-bit Adam";
}

}  // namespace
}  // namespace dtrain::parallel
