// `dtrain bench collectives`: time per call, algorithm bandwidth and bus bandwidth of each
// collective x algorithm x P x size, in the manner of nccl-tests, plus an alpha-beta fit per
// (op, algorithm, P). Reusable from tests and other tools; printing is the caller's business.
//
// Method: for each configuration, a world with the header check off: spawn_ranks(P) threads over
// inproc, or, for "mpi", the processes of the `mpirun -np P` job this program runs in (a fresh
// transport per configuration; every process runs the same configurations, rank 0 reports); each
// size gets one correctness call on known values, `warmup` untimed calls (more for small sizes,
// until warmup_seconds have passed), then, after a barrier,
// `iterations` timed calls. time per call = max over ranks of elapsed / iterations (the slowest
// rank bounds a collective). algbw = size / time, busbw = algbw x factor (nccl-tests: allreduce
// 2(P-1)/P; allgather, reduce_scatter, scatter, gather and alltoall (P-1)/P; broadcast and
// reduce 1), so busbw is comparable across P and
// with the link bandwidth.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "dtrain/base/dtype.h"

namespace dtrain::experiments {

// 4 B, 16 B, ..., 256 MiB: powers of 4 (14 sizes).
std::vector<std::int64_t> default_benchmark_sizes();

// "allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "scatter", "gather",
// "alltoall" (rooted ones at root 0).
const std::vector<std::string>& benchmark_ops();

// The nccl-tests bus-bandwidth factor of `op` on P ranks; ConfigError for an unknown op.
double bus_bandwidth_factor(std::string_view op, int ranks);

// The most ranks one configuration may have (inproc: threads of this process).
inline constexpr int kMaxBenchmarkRanks = 1024;

struct CollectiveBenchmarkOptions {
  // Subset of benchmark_ops(), run in this order.
  std::vector<std::string> ops = benchmark_ops();
  // Allreduce algorithms (allreduce_algorithms() names); empty means all that run on the
  // transport ("native" only on mpi). The other ops have one algorithm each ("binomial" broadcast,
  // "ring" allgather/reduce_scatter, "binomial" reduce/scatter/gather, "pairwise" alltoall).
  std::vector<std::string> algorithms;
  // "inproc" (spawn_ranks threads) or "mpi" (the processes of an mpirun job: launched_by_mpirun()
  // must be true, and `ranks` must be exactly {the job's size}).
  std::string transport = "inproc";
  std::vector<int> ranks = {2};
  // CommOptions::segment_bytes of the benchmarked communicators.
  std::size_t segment_bytes = std::size_t{1} << 20;
  // Bytes per rank of the largest buffer of a call (see CollectiveBenchmarkRow::size).
  std::vector<std::int64_t> sizes = default_benchmark_sizes();
  DType dtype = DType::kF32;
  int warmup = 5;
  // ... and more untimed calls until about this long has been spent warming up (small sizes).
  double warmup_seconds = 0.02;
  // Timed calls per size; 0 means sized so the size takes about target_seconds, clamped to
  // [min_iterations, max_iterations].
  std::int64_t iterations = 0;
  double target_seconds = 0.2;
  std::int64_t min_iterations = 5;
  std::int64_t max_iterations = 10000;
  // inproc: bind rank threads to CPUs when they fit (RankPinning::kWhenRanksFit), as mpirun binds
  // processes to cores by default for np <= 2, so the two transports are measured alike.
  bool pin_ranks = true;
  // One call on known values per size, compared with the closed-form result.
  bool check_correctness = true;
};

struct CollectiveBenchmarkRow {
  std::string op;
  std::string algorithm;
  std::string transport;
  int ranks = 0;
  // Bytes per rank, as nccl-tests counts them: the buffer of allreduce/broadcast, the (P x count)
  // output of allgather and gather, the (P x count) input of reduce_scatter and scatter, the
  // (P x count) buffers of alltoall. A requested size must be whole elements
  // (validate_collective_benchmark_options); for those five it is rounded down to a multiple of
  // P elements, at least P.
  std::int64_t size = 0;
  std::int64_t count = 0;  // size / dtype_size(dtype) elements
  std::string dtype;
  std::int64_t iterations = 0;
  double time_us = 0.0;  // per call, max over ranks
  double algbw = 0.0;    // GB/s = size / time
  double busbw = 0.0;    // GB/s = algbw x bus_bandwidth_factor(op, ranks)
  bool correct = false;  // true also when the check was turned off
};

// time_us = alpha_us + beta_us_per_byte x size, least squares over one (op, algorithm, P).
struct AlphaBetaFit {
  std::string op;
  std::string algorithm;
  std::string transport;
  int ranks = 0;
  int points = 0;
  double alpha_us = 0.0;          // per-call latency
  double beta_us_per_byte = 0.0;  // 1 / (1000 x asymptotic algbw in GB/s)
};

// Least squares of y = alpha + beta x with alpha, beta >= 0: the ordinary fit, or, where it gives
// a negative latency (or cost per byte), the fit of the other parameter alone with that one at 0.
// With fewer than two distinct x, beta = 0 and alpha = mean(y). O(n).
void fit_line(const std::vector<double>& x, const std::vector<double>& y, double& alpha,
              double& beta);

// One fit per (op, algorithm, transport, P) of `rows`, in first-seen order.
std::vector<AlphaBetaFit> fit_alpha_beta(const std::vector<CollectiveBenchmarkRow>& rows);

// Runs every op x algorithm x P x size of `options`; calls on_row after each size (for printing
// as it goes) and returns all rows. ConfigError for unknown ops, algorithms, transports, a P < 1
// or a size < 1, and for mpi a P other than the job's size. Under mpi only rank 0 gets rows (and
// on_row calls); the others return an empty list.
std::vector<CollectiveBenchmarkRow> run_collective_benchmark(
    const CollectiveBenchmarkOptions& options,
    const std::function<void(const CollectiveBenchmarkRow&)>& on_row = {});

// Throws ConfigError unless every op, algorithm and the transport of `options` are known (the
// message names the accepted values), and for mpi unless the process runs under mpirun; cheap (it
// does not start MPI), so a CLI can validate before starting.
void validate_collective_benchmark_options(const CollectiveBenchmarkOptions& options);

// The allreduce algorithms run when `options.algorithms` is empty: every registered one that works
// on `transport` (all but "native" on inproc).
std::vector<std::string> default_benchmark_algorithms(std::string_view transport);

}  // namespace dtrain::experiments
