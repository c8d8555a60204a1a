#include "dtrain/experiments/spatial_benchmark.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/data/synthetic.h"
#include "dtrain/nn/activation.h"
#include "dtrain/nn/conv2d.h"
#include "dtrain/nn/spatial_model.h"
#include "dtrain/parallel/comm_group.h"

namespace dtrain::experiments {

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// CPU seconds the calling thread has run (its compute: the rank's one compute thread is itself).
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// `layers` 3x3 "same" convolutions C -> C over (C, R, R), a ReLU between each two.
std::unique_ptr<nn::Model> conv_stack(const SpatialBenchmarkOptions& options,
                                      std::int64_t resolution) {
  auto model = std::make_unique<nn::Model>(tensor::Shape{options.channels, resolution, resolution});
  for (std::int64_t i = 0; i < options.layers; ++i) {
    model->add(std::make_unique<nn::Conv2d>(fmt::format("conv{}", i + 1), options.channels,
                                            options.channels, 3, 1, 1));
    if (i + 1 < options.layers) {
      model->add(std::make_unique<nn::Activation>(fmt::format("relu{}", i + 1),
                                                  nn::ActivationKind::kRelu));
    }
  }
  model->build();
  model->init(1);
  return model;
}

struct PassTimes {
  double forward = 0.0, backward = 0.0;  // seconds, the slowest rank's, median over iterations
  double forward_cpu = 0.0, backward_cpu = 0.0;  // CPU seconds, likewise
};

// `iterations` timed forward and backward passes (after one untimed) of the conv stack on `ranks`
// rank threads, each with one compute thread.
PassTimes measure(nn::Model& whole, const tensor::Tensor& images, int ranks, int iterations) {
  const auto n = static_cast<std::size_t>(iterations);
  std::vector<std::vector<double>> forward(n, std::vector<double>(static_cast<std::size_t>(ranks)));
  std::vector<std::vector<double>> backward = forward, forward_cpu = forward,
                                   backward_cpu = forward;
  comm::spawn_ranks(
      ranks,
      [&](comm::Communicator& comm) {
        ScopedComputePool pool(1);
        const nn::ForwardContext ctx{nn::Mode::kTrain, 0, 0};
        parallel::CommGroup group(comm);
        nn::SpatialSplit split;
        nn::Model* model = &whole;
        std::size_t layers = whole.layers().size();
        tensor::Tensor x = images;
        if (ranks > 1) {
          split = nn::split_spatially(whole, group);
          model = split.model.get();
          layers = split.split_layers;
          nn::take_band(images, comm.rank(), ranks, x);
        }
        tensor::Tensor dy = tensor::Tensor::empty(x.shape());
        dy.fill(0.01f);
        for (int i = -1; i < iterations; ++i) {
          comm.barrier();
          auto start = Clock::now();
          double cpu = thread_cpu_seconds();
          model->forward_range(x, ctx, {0, layers});
          const double f = seconds_since(start), f_cpu = thread_cpu_seconds() - cpu;
          comm.barrier();
          start = Clock::now();
          cpu = thread_cpu_seconds();
          model->backward_range(dy, {0, layers}, 0, /*input_grad=*/true);
          const double b = seconds_since(start), b_cpu = thread_cpu_seconds() - cpu;
          if (i >= 0) {
            const auto it = static_cast<std::size_t>(i);
            const auto r = static_cast<std::size_t>(comm.rank());
            forward[it][r] = f;
            backward[it][r] = b;
            forward_cpu[it][r] = f_cpu;
            backward_cpu[it][r] = b_cpu;
          }
        }
      },
      {}, comm::RankPinning::kWhenRanksFit);
  const auto slowest = [n](const std::vector<std::vector<double>>& times) {
    std::vector<double> per_iteration;
    for (std::size_t i = 0; i < n; ++i) {
      per_iteration.push_back(*std::max_element(times[i].begin(), times[i].end()));
    }
    return median(per_iteration);
  };
  return {slowest(forward), slowest(backward), slowest(forward_cpu), slowest(backward_cpu)};
}

}  // namespace

void check_spatial_benchmark(const SpatialBenchmarkOptions& options) {
  if (options.ranks.empty() || options.ranks.front() != 1) {
    throw ConfigError("bench spatial --ranks: the first rank count must be 1 (the baseline)");
  }
  for (const int p : options.ranks) {
    if (p < 1) throw ConfigError(fmt::format("bench spatial --ranks: {} is not >= 1", p));
    for (const std::int64_t r : options.resolutions) {
      if (r < 1 || r % p != 0) {
        throw ConfigError(fmt::format(
            "bench spatial: resolution {} does not split evenly over {} ranks; use resolutions "
            "that every --ranks value divides",
            r, p));
      }
    }
  }
  if (options.batch < 1 || options.channels < 1 || options.layers < 1 || options.rounds < 1 ||
      options.iterations < 1) {
    throw ConfigError(fmt::format(
        "bench spatial: --batch ({}), --channels ({}), --layers ({}), --rounds ({}) and "
        "--iterations ({}) must be >= 1",
        options.batch, options.channels, options.layers, options.rounds, options.iterations));
  }
}

std::vector<SpatialBenchmarkRow> run_spatial_benchmark(
    const SpatialBenchmarkOptions& options,
    const std::function<void(const SpatialBenchmarkRow&)>& on_row) {
  check_spatial_benchmark(options);
  std::vector<SpatialBenchmarkRow> rows;
  for (const std::int64_t resolution : options.resolutions) {
    data::SyntheticConfig synthetic;
    synthetic.samples = options.batch;
    synthetic.num_classes = 2;
    synthetic.sample_shape = {options.channels, resolution, resolution};
    const data::Dataset images = data::make_synthetic(synthetic);
    auto whole = conv_stack(options, resolution);
    const std::size_t kinds = options.ranks.size();
    std::vector<std::vector<PassTimes>> times(kinds);
    for (int round = 0; round < options.rounds; ++round) {
      for (std::size_t k = 0; k < kinds; ++k) {
        const std::size_t which = round % 2 == 0 ? k : kinds - 1 - k;
        times[which].push_back(
            measure(*whole, images.images, options.ranks[which], options.iterations));
      }
    }
    const double flops = static_cast<double>(options.layers) * 2.0 *
                         static_cast<double>(options.channels * options.channels * 9) *
                         static_cast<double>(options.batch * resolution * resolution);
    for (std::size_t k = 0; k < kinds; ++k) {
      SpatialBenchmarkRow row;
      row.resolution = resolution;
      row.ranks = options.ranks[k];
      std::vector<double> f, b, fs, bs, fc, bc, fcs, bcs;
      for (std::size_t round = 0; round < times[k].size(); ++round) {
        const PassTimes& mine = times[k][round];
        const PassTimes& base = times[0][round];
        f.push_back(mine.forward);
        b.push_back(mine.backward);
        fs.push_back(base.forward / mine.forward);
        bs.push_back(base.backward / mine.backward);
        fc.push_back(mine.forward_cpu);
        bc.push_back(mine.backward_cpu);
        fcs.push_back(base.forward_cpu / mine.forward_cpu);
        bcs.push_back(base.backward_cpu / mine.backward_cpu);
      }
      row.forward_ms = median(f) * 1e3;
      row.backward_ms = median(b) * 1e3;
      row.forward_speedup = median(fs);
      row.backward_speedup = median(bs);
      row.forward_cpu_ms = median(fc) * 1e3;
      row.backward_cpu_ms = median(bc) * 1e3;
      row.forward_cpu_speedup = median(fcs);
      row.backward_cpu_speedup = median(bcs);
      row.forward_gflops = flops / (row.forward_ms * 1e-3) / 1e9;
      row.halo_bytes_per_layer =
          row.ranks > 1 ? 4.0 * static_cast<double>(options.batch * options.channels * resolution)
                        : 0.0;
      if (on_row) on_row(row);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
