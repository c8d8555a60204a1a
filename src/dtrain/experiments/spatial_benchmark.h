// dtrain bench spatial: forward and backward wall-clock of a stack of 3x3 convolutions, unsplit on
// one rank against split along the image height over P ranks (nn/spatial_model.h, halo exchange),
// at several resolutions: seed 003's table of spatial parallelism (resolution, ranks, forward,
// backward, speedup), measured here on CPU rank threads.
//
// Per resolution R: images (B, C, R, R) from the synthetic data set (data/synthetic.h, shape
// (C, R, R)), a model of `layers` Conv2d(C -> C, 3x3, stride 1, padding 1) with a ReLU after each
// but the last. P = 1 runs the unsplit layers themselves (plain Conv2d, its own zero padding); P >
// 1 runs each rank's split layers (SpatialConv2d) on its band of R / P rows, ranks as threads over
// the in-process transport, each rank one compute thread and, when the ranks fit the CPUs, its own
// CPU: the same compute per rank as the one-rank baseline has in total, so the speedup is the
// split's alone. Backward computes the weight and the input gradients of every layer (the input's
// too), with the halo gradients sent back. The gather before a head is not timed (the table is of
// the convolutions, as seed 003's).
// Time of a pass = the slowest rank's, after a barrier; per round each P runs `iterations` timed
// passes (median kept) after one untimed pass; rounds alternate the P order (ascending on even
// rounds, descending on odd) so that the shared host's noise falls on all alike; the row is the
// median over rounds. Speedup = the P = 1 row's time / this row's, per round, median over rounds.
// The same again in CPU time of each rank's thread: on a host whose other load takes cores away
// (the shared development machine), wall time measures the load; CPU time measures the split.
// Beside it the bound: FLOPs per rank 2 C^2 9 B R^2 / P forward (twice that backward) at the
// measured one-rank rate, and halo bytes each rank sends per layer and neighbour, 4 B C p R with
// p = 1 (the same again backward).
//
// `model = "resnet"`: the ResNet of nn/model_resnet.cc instead (width w = `channels`, `layers`
// blocks per stage, images (1, R, R), R divisible by 4 P), timed from its input through the global
// average pool (every layer the split takes: conv1, the residual blocks with their stride-2 3x3
// convolutions and 1x1 projections, the batch norms with their allreduced statistics, the pool's
// allreduce of B C band sums); flatten and fc, replicated, are not timed. FLOPs: the convolutions',
// 2 F C K^2 OH OW B each. Halo bytes: what rank 0 sent in a forward pass, measured (all layers).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::experiments {

struct SpatialBenchmarkOptions {
  std::vector<std::int64_t> resolutions{64, 256};
  std::vector<int> ranks{1, 2};  // the first must be 1: the baseline
  std::int64_t batch = 4;
  std::int64_t channels = 16;
  std::int64_t layers = 2;
  std::string model = "convs";  // "convs" (the stack above) or "resnet"
  int rounds = 5;
  int iterations = 3;
};

struct SpatialBenchmarkRow {
  std::int64_t resolution = 0;
  int ranks = 1;
  double forward_ms = 0.0, backward_ms = 0.0;  // medians over rounds
  double forward_speedup = 1.0, backward_speedup = 1.0;
  // The slowest rank's CPU time of its thread (CLOCK_THREAD_CPUTIME_ID; blocking waits excluded):
  // the wall time it would take with a core of its own, the figure to read on a shared host.
  double forward_cpu_ms = 0.0, backward_cpu_ms = 0.0;
  double forward_cpu_speedup = 1.0, backward_cpu_speedup = 1.0;
  double forward_gflops = 0.0;            // FLOPs of the whole pass / time (all ranks together)
  double halo_bytes_per_layer = 0.0;      // sent by an interior rank per layer, forward
  double halo_bytes_forward_rank0 = 0.0;  // sent by rank 0 in one forward pass, measured
};

// ConfigError for a resolution that P (4 P for the ResNet) does not divide, ranks not starting at
// 1, sizes below 1, a model other than "convs" or "resnet".
void check_spatial_benchmark(const SpatialBenchmarkOptions& options);

// Rows in resolution order, then rank order; `on_row` sees each as it is finished.
std::vector<SpatialBenchmarkRow> run_spatial_benchmark(
    const SpatialBenchmarkOptions& options,
    const std::function<void(const SpatialBenchmarkRow&)>& on_row = {});

}  // namespace dtrain::experiments
