// The collective benchmark (experiments/collective_benchmark.h): its rows carry nccl-tests'
// bus-bandwidth factors and pass their correctness checks, sizes are rounded as documented, and the
// alpha-beta fit recovers known coefficients.
#include "dtrain/experiments/collective_benchmark.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::experiments {
namespace {

using namespace dtrain::comm;  // NOLINT(google-build-using-namespace)

CollectiveBenchmarkOptions tiny(std::vector<int> ranks) {
  CollectiveBenchmarkOptions options;
  options.ranks = std::move(ranks);
  options.sizes = {4, 100, 4096};
  options.iterations = 3;
  options.warmup = 1;
  return options;
}

TEST(CollectiveBenchmark, DefaultSizesArePowersOfFourFrom4BTo256MiB) {
  const auto sizes = default_benchmark_sizes();
  ASSERT_EQ(sizes.size(), 14u);
  EXPECT_EQ(sizes.front(), 4);
  EXPECT_EQ(sizes.back(), std::int64_t{256} << 20);
  for (std::size_t i = 1; i < sizes.size(); ++i) EXPECT_EQ(sizes[i], 4 * sizes[i - 1]);
}

TEST(CollectiveBenchmark, BusBandwidthFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("allreduce", 4), 1.5);  // 2 x 3 / 4
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("allgather", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce_scatter", 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("broadcast", 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("allreduce", 1), 0.0);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("alltoall", 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("scatter", 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_bandwidth_factor("reduce", 4), 1.0);
  EXPECT_THROW(bus_bandwidth_factor("allpairs", 2), ConfigError);
}

TEST(CollectiveBenchmark, RowsAreCorrectAndCarryTheBusFactor) {
  auto options = tiny({1, 2, 3});
  int reported = 0;
  const auto rows = run_collective_benchmark(options, [&](const auto&) { ++reported; });
  // Every allreduce algorithm but "native" (inproc has none) + broadcast + allgather +
  // reduce_scatter, x 3 P x 3 sizes.
  ASSERT_EQ(rows.size(), (allreduce_algorithms().size() - 1 + 7) * 3 * 3);
  EXPECT_EQ(reported, static_cast<int>(rows.size()));
  for (const auto& row : rows) {
    SCOPED_TRACE(row.op + " " + row.algorithm + " P=" + std::to_string(row.ranks) +
                 " size=" + std::to_string(row.size));
    EXPECT_TRUE(row.correct);
    EXPECT_EQ(row.transport, "inproc");
    EXPECT_EQ(row.dtype, "f32");
    EXPECT_EQ(row.iterations, 3);
    EXPECT_EQ(row.size, row.count * 4);
    ASSERT_GT(row.time_us, 0.0);
    EXPECT_NEAR(row.algbw, static_cast<double>(row.size) / (row.time_us * 1e-6) / 1e9,
                1e-9 * row.algbw + 1e-12);
    EXPECT_NEAR(row.busbw, row.algbw * bus_bandwidth_factor(row.op, row.ranks),
                1e-12 + 1e-12 * row.algbw);
    if (row.op == "broadcast") {
      EXPECT_EQ(row.algorithm, "binomial");
    }
    if (row.op == "allgather" || row.op == "reduce_scatter") {
      EXPECT_EQ(row.algorithm, "ring");
      EXPECT_EQ(row.count % row.ranks, 0);  // P blocks of equal size
    }
  }
  // 100 B at P = 3: 25 f32 rounded down to 24 for allgather; 4 B at P = 3: one element per rank.
  bool seen_100 = false, seen_4 = false;
  for (const auto& row : rows) {
    if (row.op != "allgather" || row.ranks != 3) continue;
    if (row.count == 24) seen_100 = true;
    if (row.count == 3) seen_4 = true;
  }
  EXPECT_TRUE(seen_100);
  EXPECT_TRUE(seen_4);
}

TEST(CollectiveBenchmark, OtherDtypesAreCheckedToo) {
  for (DType dtype : {DType::kF64, DType::kF16, DType::kBF16, DType::kI32, DType::kU8}) {
    auto options = tiny({4});
    options.dtype = dtype;
    options.sizes = {64};
    for (const auto& row : run_collective_benchmark(options)) {
      EXPECT_TRUE(row.correct) << row.op << " " << row.algorithm << " " << row.dtype;
      EXPECT_EQ(row.dtype, std::string(dtype_name(dtype)));
    }
  }
}

TEST(CollectiveBenchmark, UnknownNamesAreConfigErrorsNamingTheAcceptedValues) {
  auto options = tiny({2});
  options.algorithms = {"ring", "butterfly"};
  try {
    run_collective_benchmark(options);
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("butterfly"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("halving-doubling"), std::string::npos) << e.what();
  }
  options = tiny({2});
  options.transport = "mpi";
  EXPECT_THROW(validate_collective_benchmark_options(options), ConfigError);
  options = tiny({2});
  options.ops = {"allpairs"};
  EXPECT_THROW(validate_collective_benchmark_options(options), ConfigError);
  options = tiny({0});
  EXPECT_THROW(validate_collective_benchmark_options(options), ConfigError);
}

TEST(CollectiveBenchmark, FitRecoversAlphaBetaOfSyntheticTimings) {
  // time = 3 us + size / (2 GB/s) = 3 + 5e-4 x size us, over two (op, algorithm, P) groups.
  std::vector<CollectiveBenchmarkRow> rows;
  for (std::int64_t size : default_benchmark_sizes()) {
    CollectiveBenchmarkRow a{"allreduce", "ring", "inproc",
                             2,           size,   size / 4,
                             "f32",       1,      3.0 + 5e-4 * static_cast<double>(size)};
    CollectiveBenchmarkRow b = a;
    b.ranks = 4;
    b.time_us = 10.0 + 1e-3 * static_cast<double>(size);
    rows.push_back(a);
    rows.push_back(b);
  }
  const auto fits = fit_alpha_beta(rows);
  ASSERT_EQ(fits.size(), 2u);
  EXPECT_EQ(fits[0].ranks, 2);
  EXPECT_EQ(fits[0].points, 14);
  EXPECT_NEAR(fits[0].alpha_us, 3.0, 1e-4);
  EXPECT_NEAR(fits[0].beta_us_per_byte, 5e-4, 1e-12);
  EXPECT_EQ(fits[1].ranks, 4);
  EXPECT_NEAR(fits[1].alpha_us, 10.0, 1e-4);
  EXPECT_NEAR(fits[1].beta_us_per_byte, 1e-3, 1e-12);

  // Noisy points: y = 1 + 2x + e with e = +1, -1, -1, +1 at x = 0..3; e sums to zero and
  // sum (x - 1.5) e = -1.5 + 0.5 - 0.5 + 1.5 = 0, so least squares gives exactly 1 and 2.
  double alpha = 0, beta = 0;
  fit_line({0, 1, 2, 3}, {2, 2, 4, 8}, alpha, beta);
  EXPECT_NEAR(alpha, 1.0, 1e-12);
  EXPECT_NEAR(beta, 2.0, 1e-12);
  // One distinct x: no slope, alpha is the mean.
  fit_line({5, 5}, {1, 3}, alpha, beta);
  EXPECT_DOUBLE_EQ(beta, 0.0);
  EXPECT_DOUBLE_EQ(alpha, 2.0);
}

}  // namespace
}  // namespace dtrain::experiments

namespace dtrain::experiments {
namespace {

// Noise at the small sizes can tilt an ordinary fit below zero latency; the fit then keeps the
// latency at 0 and fits the cost per byte alone (y = beta x through the origin).
TEST(CollectiveBenchmark, FitNeverReportsANegativeLatencyOrCostPerByte) {
  double alpha = 0.0, beta = 0.0;
  // OLS through (1, 0), (2, 5), (3, 6): beta 3, alpha -2.
  fit_line({1.0, 2.0, 3.0}, {0.0, 5.0, 6.0}, alpha, beta);
  EXPECT_DOUBLE_EQ(alpha, 0.0);
  EXPECT_NEAR(beta, (0.0 + 10.0 + 18.0) / (1.0 + 4.0 + 9.0), 1e-12);
  // Falling times: beta would be negative; the latency is then the mean.
  fit_line({1.0, 2.0, 3.0}, {6.0, 5.0, 4.0}, alpha, beta);
  EXPECT_DOUBLE_EQ(beta, 0.0);
  EXPECT_DOUBLE_EQ(alpha, 5.0);
}

TEST(CollectiveBenchmark, SizesMustBeWholeElements) {
  CollectiveBenchmarkOptions options;
  options.ops = {"allreduce"};
  options.ranks = {2};
  options.sizes = {4, 3};
  EXPECT_THAT([&] { validate_collective_benchmark_options(options); },
              ::testing::ThrowsMessage<ConfigError>(::testing::HasSubstr("size 3 bytes")));
}

}  // namespace
}  // namespace dtrain::experiments
