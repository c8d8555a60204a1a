// Parameter servers over in-process ranks: the key-value view, bsp equal to the summed update,
// backup workers dropping late gradients (never applying them), async and ssp converging on a
// convex problem, ssp's staleness bound, and dead workers (async goes on, bsp names them).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <thread>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/comm/comm_error.h"
#include "ps_harness.h"

namespace dtrain::ps {
namespace {

using testing::PsRun;
using testing::run_ps;
using testing::sgd_options;

TEST(ParameterServer, PutGetAddOverThreeServers) {
  constexpr std::int64_t kKeys = 101;
  std::vector<float> got(kKeys);
  std::vector<float> middle(10);
  run_ps(2, 3, kKeys, sgd_options(Consistency::kAsync, kKeys), [&](Client& client, int worker) {
    if (worker == 0) {
      std::vector<float> values(kKeys);
      std::iota(values.begin(), values.end(), 0.0f);
      client.put({0, kKeys}, values.data());
      const std::vector<float> delta(kKeys, 0.5f);
      client.add({0, kKeys}, delta.data());
      client.add_async({0, kKeys}, delta.data()).wait(std::chrono::seconds(10));
      client.get({0, kKeys}, got.data());
      client.get_async({30, 40}, middle.data()).wait(std::chrono::seconds(10));
    }
    client.stop();
  });
  for (std::int64_t i = 0; i < kKeys; ++i) EXPECT_EQ(got[i], static_cast<float>(i) + 1.0f) << i;
  for (std::int64_t i = 0; i < 10; ++i) EXPECT_EQ(middle[i], static_cast<float>(30 + i) + 1.0f);
}

// Worker w's gradient at every step: (w + 1) / W on every key, as data parallelism scales it.
std::vector<float> gradient_of(int worker, int workers, std::int64_t keys, float scale = 1.0f) {
  return std::vector<float>(static_cast<std::size_t>(keys),
                            scale * static_cast<float>(worker + 1) / static_cast<float>(workers));
}

TEST(ParameterServer, PushesWholeShardsAndRefusesToCutOne) {
  constexpr std::int64_t kKeys = 10;  // shards [0, 5) and [5, 10)
  std::vector<float> got(kKeys);
  run_ps(1, 2, kKeys, sgd_options(Consistency::kAsync, kKeys), [&](Client& client, int) {
    const std::vector<float> ones(kKeys, 1.0f);
    client.push_async({5, 10}, ones.data(), {0, 1, 1, 0.5}).wait(std::chrono::seconds(10));
    EXPECT_THROW(client.push({2, 10}, ones.data(), {1, 1, 1, 0.5}), ConfigError);
    client.get({0, kKeys}, got.data());
    client.stop();
  });
  for (std::int64_t i = 0; i < kKeys; ++i) EXPECT_EQ(got[i], i < 5 ? 0.0f : -0.5f) << i;
}

TEST(ParameterServer, BspAppliesTheSumOfEveryWorkersGradientOncePerStep) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 7;
  constexpr int kSteps = 4;
  constexpr double kLr = 0.5;
  std::vector<std::vector<float>> pulled(kWorkers, std::vector<float>(kKeys));
  const auto run = run_ps(
      kWorkers, 2, kKeys, sgd_options(Consistency::kBsp, kKeys), [&](Client& client, int worker) {
        const auto grads = gradient_of(worker, kWorkers, kKeys);
        auto& params = pulled[static_cast<std::size_t>(worker)];
        for (int step = 0; step < kSteps; ++step) {
          const PushResult result =
              client.push({0, kKeys}, grads.data(), {step, 1, kWorkers, kLr}, params.data());
          EXPECT_FALSE(result.dropped);
        }
        client.stop();
      });
  // Each step subtracts lr x (1 + 2 + 3) / 3 = 1.
  for (const auto& params : pulled) {
    for (const float p : params) EXPECT_FLOAT_EQ(p, -kSteps * kLr * 2.0);
  }
  for (const float p : testing::joined(run)) EXPECT_FLOAT_EQ(p, -kSteps * kLr * 2.0);
  for (const auto& stats : run.stats) {
    EXPECT_EQ(stats.version, kSteps);
    EXPECT_EQ(stats.applied, kSteps * kWorkers);
    EXPECT_EQ(stats.dropped, 0);
    EXPECT_EQ(stats.max_staleness, 0);
  }
}

TEST(ParameterServer, ARankCanBeWorkerAndServer) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 11;
  const auto run = run_ps(
      kWorkers, 2, kKeys, sgd_options(Consistency::kBsp, kKeys),
      [&](Client& client, int worker) {
        const auto grads = gradient_of(worker, kWorkers, kKeys);
        std::vector<float> params(kKeys);
        for (int step = 0; step < 3; ++step)
          client.push({0, kKeys}, grads.data(), {step, 1, 3, 1.0}, params.data());
        for (const float p : params) EXPECT_FLOAT_EQ(p, -3.0f * 2.0f);
        client.stop();
      },
      /*colocated=*/true);
  for (const auto& stats : run.stats) EXPECT_EQ(stats.version, 3);
}

TEST(ParameterServer, BackupWorkerLetsStepsCompleteWithoutTheLateOneAndDropsItsGradients) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 5;
  constexpr int kSteps = 5;
  constexpr double kLr = 0.1;
  auto options = sgd_options(Consistency::kBsp, kKeys);
  options.backup_workers = 1;
  std::vector<int> dropped(kWorkers, 0);
  const auto run = run_ps(kWorkers, 2, kKeys, options, [&](Client& client, int worker) {
    // The slow worker's gradient is huge: applied even once, it would show.
    const auto grads =
        worker == 2 ? std::vector<float>(kKeys, 1e6f) : gradient_of(worker, 3, kKeys);
    std::vector<float> params(kKeys);
    for (int step = 0; step < kSteps; ++step) {
      if (worker == 2) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (client.push({0, kKeys}, grads.data(), {step, 1, kWorkers, kLr}, params.data()).dropped) {
        ++dropped[static_cast<std::size_t>(worker)];
      }
    }
    client.stop();
  });
  EXPECT_EQ(dropped[0], 0);
  EXPECT_EQ(dropped[1], 0);
  EXPECT_EQ(dropped[2], kSteps);
  // Workers 0 and 1 cover 2 of the 3 samples: their sum (1/3 + 2/3) is scaled by 3/2.
  for (const float p : testing::joined(run)) EXPECT_NEAR(p, -kSteps * kLr * 1.5, 1e-5);
  for (const auto& stats : run.stats) {
    EXPECT_EQ(stats.version, kSteps);
    EXPECT_EQ(stats.dropped, kSteps);
    EXPECT_EQ(stats.pushes[2], kSteps);
  }
}

// f(x) = 1/2 |x - x*|^2 with noisy gradients x - x* + noise: every consistency must reach x*.
struct Quadratic {
  std::vector<float> optimum;
  explicit Quadratic(std::int64_t keys) : optimum(static_cast<std::size_t>(keys)) {
    for (std::size_t i = 0; i < optimum.size(); ++i) {
      optimum[i] = std::sin(static_cast<float>(i)) * 3.0f;
    }
  }
  void gradient(const std::vector<float>& x, std::uint64_t stream, std::vector<float>& g) const {
    Rng rng(17, stream);
    for (std::size_t i = 0; i < x.size(); ++i) {
      g[i] = x[i] - optimum[i] + 0.01f * rng.normal();
    }
  }
  double distance(const std::vector<float>& x) const {
    double sum = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) sum += std::pow(x[i] - optimum[i], 2);
    return std::sqrt(sum);
  }
};

// Workers run `steps` push-and-pull steps on the quadratic; worker `slow` sleeps `nap` per step.
PsRun train_quadratic(Consistency consistency, std::int64_t staleness, int slow,
                      std::chrono::microseconds nap, int steps = 200) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 50;
  const Quadratic problem(kKeys);
  auto options = sgd_options(consistency, kKeys);
  options.staleness = staleness;
  return run_ps(kWorkers, 2, kKeys, options, [&](Client& client, int worker) {
    std::vector<float> x(kKeys);
    std::vector<float> g(kKeys);
    client.pull({0, kKeys}, x.data(), 0);
    for (int step = 0; step < steps; ++step) {
      if (worker == slow) std::this_thread::sleep_for(nap);
      problem.gradient(x, static_cast<std::uint64_t>(worker * 100000 + step), g);
      client.push({0, kKeys}, g.data(), {step, 1, 1, 0.05}, x.data());
    }
    client.stop();
  });
}

TEST(ParameterServer, AsyncAndSspConvergeToTheOptimumOfAConvexProblem) {
  const Quadratic problem(50);
  for (const auto consistency : {Consistency::kAsync, Consistency::kSsp}) {
    const auto run = train_quadratic(consistency, 2, 2, std::chrono::microseconds(300));
    EXPECT_LT(problem.distance(testing::joined(run)), 0.05) << consistency_name(consistency);
    for (const auto& stats : run.stats) EXPECT_EQ(stats.applied, 3 * 200);
  }
}

TEST(ParameterServer, SspNeverAppliesAGradientStalerThanItsBoundWhileAsyncDoes) {
  constexpr std::int64_t kBound = 2;
  const auto nap = std::chrono::microseconds(2000);
  const auto ssp = train_quadratic(Consistency::kSsp, kBound, 2, nap, 60);
  for (const auto& stats : ssp.stats) {
    EXPECT_LE(stats.max_staleness, kBound);
    // The fast workers did run ahead, up to the bound.
    EXPECT_EQ(stats.max_staleness, kBound);
  }
  const auto async = train_quadratic(Consistency::kAsync, 0, 2, nap, 60);
  for (const auto& stats : async.stats) EXPECT_GT(stats.max_staleness, kBound);
}

TEST(ParameterServer, AsyncGoesOnWhenAWorkerDies) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 50;
  const Quadratic problem(kKeys);
  const auto run = run_ps(kWorkers, 2, kKeys, sgd_options(Consistency::kAsync, kKeys),
                          [&](Client& client, int worker) {
                            std::vector<float> x(kKeys);
                            std::vector<float> g(kKeys);
                            client.pull({0, kKeys}, x.data(), 0);
                            for (int step = 0; step < 300; ++step) {
                              // Worker 2 dies: its thread ends without a word to the servers.
                              if (worker == 2 && step == 5) return;
                              problem.gradient(x, static_cast<std::uint64_t>(step), g);
                              client.push({0, kKeys}, g.data(), {step, 1, 1, 0.05}, x.data());
                            }
                            client.stop();
                          });
  EXPECT_LT(problem.distance(testing::joined(run)), 0.05);
  for (const auto& stats : run.stats) {
    EXPECT_THAT(stats.dead, ::testing::ElementsAre(0, 0, 1));
    EXPECT_EQ(stats.pushes[0], 300);
    EXPECT_EQ(stats.pushes[2], 5);
  }
}

TEST(ParameterServer, BspNamesAWorkerThatDied) {
  constexpr std::int64_t kKeys = 8;
  try {
    run_ps(3, 2, kKeys, sgd_options(Consistency::kBsp, kKeys), [&](Client& client, int worker) {
      std::vector<float> g(kKeys, 1.0f);
      std::vector<float> x(kKeys);
      for (int step = 0; step < 20; ++step) {
        if (worker == 2 && step == 3) return;
        client.push({0, kKeys}, g.data(), {step, 1, 3, 0.1}, x.data());
      }
      client.stop();
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("worker 2 (rank 2)"));
  }
}

TEST(ParameterServer, BspTimesOutNamingTheWorkerThatNeverPushed) {
  constexpr std::int64_t kKeys = 8;
  auto options = sgd_options(Consistency::kBsp, kKeys);
  options.timeout = std::chrono::milliseconds(300);
  try {
    run_ps(2, 1, kKeys, options, [&](Client& client, int worker) {
      std::vector<float> g(kKeys, 1.0f);
      std::vector<float> x(kKeys);
      // Worker 1 hangs (alive, silent) past the servers' deadline.
      if (worker == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      client.push({0, kKeys}, g.data(), {0, 1, 2, 0.1}, x.data());
      client.stop();
    });
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("worker(s) 1 (rank 1)"));
  }
}

// Before the deadline, the stall threshold: the server names the step and the worker it waits
// for, the waiting worker names its op, step and the server's rank; the run still fails at the
// deadline (the warnings do not end the waits).
TEST(ParameterServer, BspStallWarnsNamingTheMissingWorkerBeforeTheDeadline) {
  constexpr std::int64_t kKeys = 8;
  auto options = sgd_options(Consistency::kBsp, kKeys);
  options.timeout = std::chrono::milliseconds(800);
  options.stall_warning = std::chrono::milliseconds(150);
  ::testing::internal::CaptureStderr();
  std::string error;
  try {
    run_ps(2, 1, kKeys, options, [&](Client& client, int worker) {
      client.set_stall_warning(std::chrono::milliseconds(150));
      std::vector<float> g(kKeys, 1.0f);
      std::vector<float> x(kKeys);
      if (worker == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1200));
      client.push({0, kKeys}, g.data(), {0, 1, 2, 0.1}, x.data());
      client.stop();
    });
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(error, ::testing::HasSubstr("worker(s) 1 (rank 1)"));
  EXPECT_THAT(log, ::testing::HasSubstr("stall: ps server 0 has waited"));
  EXPECT_THAT(log, ::testing::HasSubstr("in bsp step 0 for the gradients of worker(s) 1 (rank 1)"));
  EXPECT_THAT(log, ::testing::HasSubstr("stall: ps worker (rank 0) has waited"));
  EXPECT_THAT(log, ::testing::HasSubstr("in ps push of step 0 for a message from rank 2"));
}

TEST(ParameterServer, AsyncWarnsAboutASilentWorkerAndGoesOn) {
  constexpr std::int64_t kKeys = 8;
  auto options = sgd_options(Consistency::kAsync, kKeys);
  options.stall_warning = std::chrono::milliseconds(100);
  ::testing::internal::CaptureStderr();
  const PsRun run = run_ps(2, 1, kKeys, options, [&](Client& client, int worker) {
    std::vector<float> g(kKeys, 1.0f);
    client.push({0, kKeys}, g.data(), {0, 1, 2, 0.1});
    if (worker == 1) std::this_thread::sleep_for(std::chrono::milliseconds(400));
    client.push({0, kKeys}, g.data(), {1, 1, 2, 0.1});
    client.stop();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log,
              ::testing::HasSubstr("stall: ps server 0 has heard nothing from worker 1 (rank 1)"));
  EXPECT_EQ(log.find("stall:"), log.rfind("stall:")) << "one warning per silence: " << log;
  EXPECT_EQ(run.stats[0].version, 4);
}

// async: a worker silent past the deadline is counted dead; when it comes back while the others
// train on, its requests are refused with EvictedError (it stops), its stop is still answered,
// and the run ends with the others' updates only.
TEST(ParameterServer, AsyncEvictsAWorkerThatCameBackAfterItWasCountedDead) {
  constexpr std::int64_t kKeys = 4;
  auto options = sgd_options(Consistency::kAsync, kKeys);
  options.timeout = std::chrono::milliseconds(300);
  options.worker_timeout = std::chrono::milliseconds(300);
  std::string evicted;
  ::testing::internal::CaptureStderr();
  const PsRun run = run_ps(2, 1, kKeys, options, [&](Client& client, int worker) {
    std::vector<float> g(kKeys, 1.0f);
    client.push({0, kKeys}, g.data(), {0, 1, 2, 0.1});
    if (worker == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(900));  // silent past the deadline
      try {
        client.push({0, kKeys}, g.data(), {1, 1, 2, 0.1});
      } catch (const EvictedError& e) {
        evicted = e.what();
      }
    } else {
      // Worker 0 trains on for longer than worker 1 sleeps.
      for (int step = 1; step <= 60; ++step) {
        client.push({0, kKeys}, g.data(), {step, 1, 2, 0.1});
        std::this_thread::sleep_for(std::chrono::milliseconds(25));
      }
    }
    client.stop();
  });
  const std::string log = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(log, ::testing::HasSubstr("worker 1 (rank 1) silent for"));
  EXPECT_THAT(evicted, ::testing::HasSubstr("worker 1 (rank 1) was counted dead"));
  EXPECT_EQ(run.stats[0].version, 62) << "worker 0's 61 pushes and worker 1's first only";
  EXPECT_EQ(run.stats[0].dead[1], 1);
}

// Robust aggregation (bsp): each worker's gradient, rescaled to its own mean (B / its samples), is
// a row; the rows are combined in worker order by the aggregator, after the attack replaced the
// last f workers' rows. Checked against the definitions by hand on 2 servers.
TEST(ParameterServer, BspRobustAggregationCombinesEachWorkersMeanGradient) {
  constexpr std::int64_t kKeys = 5;
  constexpr float kLr = 0.5f;
  // Worker w's gradient of its own samples, and what it pushes: a share s_w / B of it.
  const std::vector<std::vector<float>> own = {
      {1, 2, 3, 4, 5}, {2, 2, 2, 2, 2}, {-1, 0, 7, 1, 0}, {9, 9, -9, 9, 9}};
  const std::vector<std::int64_t> samples = {1, 2, 3, 2};  // B = 8
  auto run = [&](const std::string& aggregator, const std::string& attack, int byzantine) {
    auto options = sgd_options(Consistency::kBsp, kKeys);
    options.aggregator = aggregator;
    options.attack = attack;
    options.byzantine = byzantine;
    return joined(run_ps(4, 2, kKeys, options, [&](Client& client, int worker) {
      const auto w = static_cast<std::size_t>(worker);
      std::vector<float> pushed(own[w]);
      for (float& g : pushed) g *= static_cast<float>(samples[w]) / 8.0f;
      client.push({0, kKeys}, pushed.data(), {0, samples[w], 8, kLr});
      client.stop();
    }));
  };
  // Coordinate-wise median of 4 rows: the mean of the middle two.
  const std::vector<float> median = run("median", "none", 0);
  const std::vector<float> expected_median = {-0.75f, -1.0f, -1.25f, -1.5f, -1.75f};
  for (std::int64_t i = 0; i < kKeys; ++i) {
    EXPECT_FLOAT_EQ(median[static_cast<std::size_t>(i)],
                    expected_median[static_cast<std::size_t>(i)])
        << i;
  }
  // Sign flip on the last worker, then the plain mean of the rows.
  const std::vector<float> flipped = run("mean", "signflip", 1);
  for (std::int64_t i = 0; i < kKeys; ++i) {
    const auto k = static_cast<std::size_t>(i);
    const float mean = (own[0][k] + own[1][k] + own[2][k] - own[3][k]) / 4.0f;
    EXPECT_FLOAT_EQ(flipped[k], -kLr * mean) << i;
  }
  // Krum needs n > 2f + 2: 4 workers with f = 1 do not; said with the numbers.
  try {
    run("krum", "none", 1);
    FAIL() << "expected Krum to refuse";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("krum"));
  }
}

// Checkpoints: get_state returns the servers' optimizer state in the layout of one optimizer over
// every key, whatever the server count, and set_state loads such a state into any server count, so
// that training continues exactly as one optimizer would have.
TEST(ParameterServer, OptimizerStateMovesBetweenServerCountsInTheOneOptimizerLayout) {
  constexpr std::int64_t kKeys = 11;
  constexpr double kLr = 0.1;
  ServerOptions options = sgd_options(Consistency::kBsp, kKeys);
  options.optimizer.name = "adam";
  options.segments = {{"a", 0, 4, true}, {"b", 4, 7, false}};
  options.optimizer.weight_decay = 0.01;
  const auto reference = optim::make_optimizer(options.optimizer, options.segments);
  std::vector<float> params(kKeys);
  for (std::int64_t i = 0; i < kKeys; ++i) params[static_cast<std::size_t>(i)] = 0.1f * i - 0.3f;
  const std::vector<float> initial = params;
  auto gradient = [](int step) {
    std::vector<float> g(kKeys);
    for (std::int64_t i = 0; i < kKeys; ++i) {
      g[static_cast<std::size_t>(i)] = std::sin(static_cast<float>(step * kKeys + i));
    }
    return g;
  };
  for (int step = 0; step < 2; ++step) reference->step(params.data(), gradient(step).data(), kLr);
  const std::vector<optim::StateTensor> after_two = reference->state();
  ASSERT_EQ(after_two.size(), 2u);

  // Two steps on 3 servers, then the state read back in the one-optimizer layout.
  OptimizerState saved;
  std::vector<float> saved_params(kKeys);
  run_ps(1, 3, kKeys, options, [&](Client& client, int) {
    client.put({0, kKeys}, initial.data());
    for (int step = 0; step < 2; ++step) {
      const auto g = gradient(step);
      EXPECT_EQ(client.push({0, kKeys}, g.data(), {step, 1, 1, kLr}, saved_params.data()).version,
                step + 1);
    }
    saved = client.get_state({0, kKeys});
    client.stop();
  });
  EXPECT_EQ(saved_params, params);
  ASSERT_EQ(saved.vectors.size(), 2u);
  EXPECT_EQ(saved.vectors[0], after_two[0].values);
  EXPECT_EQ(saved.vectors[1], after_two[1].values);
  EXPECT_EQ(saved.steps, (std::vector<std::int64_t>{2, 2, 2}));

  // Loaded into 2 servers, the third step is the one optimizer's third step, bit for bit.
  reference->step(params.data(), gradient(2).data(), kLr);
  std::vector<float> resumed(kKeys);
  OptimizerState after_three;
  run_ps(1, 2, kKeys, options, [&](Client& client, int) {
    client.put({0, kKeys}, saved_params.data());
    client.set_state({0, kKeys}, saved.vectors, 2);
    const auto g = gradient(2);
    EXPECT_EQ(client.push({0, kKeys}, g.data(), {2, 1, 1, kLr}, resumed.data()).version, 3);
    after_three = client.get_state({0, kKeys});
    // A state of another optimizer is refused by the server, named, and the server serves on.
    EXPECT_THAT(
        [&] {
          client.set_state({0, kKeys}, {saved.vectors[1], saved.vectors[1], saved.vectors[1]}, 3);
        },
        ::testing::ThrowsMessage<CheckpointError>(
            ::testing::HasSubstr("optimizer state vector 2 sent, the optimizer has 2")));
    client.stop();
  });
  EXPECT_EQ(resumed, params);
  EXPECT_EQ(after_three.vectors[0], reference->state()[0].values);
  EXPECT_EQ(after_three.vectors[1], reference->state()[1].values);
}

// A resumed run's first ticket request names the first ticket of its epoch: the tickets of the
// epochs its checkpoint holds are skipped, and later requests go on from there.
TEST(ParameterServer, TicketsStartWhereAResumedRunAsks) {
  ServerOptions options = sgd_options(Consistency::kAsync, 4);
  options.tickets = 10;
  run_ps(1, 1, 4, options, [&](Client& client, int) {
    EXPECT_EQ(client.next_ticket(6), 6);
    EXPECT_EQ(client.next_ticket(0), 7);
    EXPECT_EQ(client.next_ticket(12), -1);
    client.stop();
  });
}

}  // namespace
}  // namespace dtrain::ps
