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
#include "dtrain/nn/model_zoo.h"
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

bool is_resnet(const SpatialBenchmarkOptions& options) { return options.model == "resnet"; }

// The ResNet of model_resnet.cc, width `channels`, `layers` blocks per stage, (1, R, R).
std::unique_ptr<nn::Model> resnet(const SpatialBenchmarkOptions& options, std::int64_t resolution) {
  nn::ModelSpec spec;
  spec.name = "resnet";
  spec.input = {1, resolution, resolution};
  spec.num_classes = 10;
  spec.resnet_width = options.channels;
  spec.resnet_blocks = options.layers;
  auto model = nn::build_model(spec);
  model->init(1);
  return model;
}

// Forward FLOPs of the ResNet's convolutions for `batch` images of R x R, 2 F C K^2 OH OW each:
// conv1 (1 -> w, 3x3); per stage s of width w_s on (R / 2^(s-1))^2 outputs, the first block's
// 3x3 from the previous width (and its 1x1 projection in stages 2, 3), then 3x3 w_s -> w_s.
double resnet_flops(const SpatialBenchmarkOptions& options, std::int64_t resolution) {
  const double w = static_cast<double>(options.channels), n = static_cast<double>(options.layers);
  double flops = 2.0 * w * 9.0 * static_cast<double>(resolution * resolution);
  double previous = w;
  for (int stage = 0; stage < 3; ++stage) {
    const double ws = w * (1 << stage);
    const double area = static_cast<double>((resolution >> stage) * (resolution >> stage));
    flops += 2.0 * 9.0 * ws * previous * area;              // block 1, conv1
    flops += 2.0 * 9.0 * ws * ws * area * (2.0 * n - 1.0);  // the other 3x3s
    if (stage > 0) flops += 2.0 * ws * previous * area;     // the projection
    previous = ws;
  }
  return flops * static_cast<double>(options.batch);
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
  double halo_bytes = 0.0;                       // rank 0's sends in its last forward
};

// `iterations` timed forward and backward passes (after one untimed) of the conv stack (or the
// ResNet's layers [0, timed)) on `ranks` rank threads, each with one compute thread.
PassTimes measure(nn::Model& whole, std::size_t timed, const tensor::Tensor& images, int ranks,
                  int iterations) {
  const auto n = static_cast<std::size_t>(iterations);
  std::vector<std::vector<double>> forward(n, std::vector<double>(static_cast<std::size_t>(ranks)));
  std::vector<std::vector<double>> backward = forward, forward_cpu = forward,
                                   backward_cpu = forward;
  double halo_bytes = 0.0;
  comm::spawn_ranks(
      ranks,
      [&](comm::Communicator& comm) {
        ScopedComputePool pool(1);
        const nn::ForwardContext ctx{nn::Mode::kTrain, 0, 0};
        parallel::CommGroup group(comm);
        nn::SpatialSplit split;
        nn::Model* model = &whole;
        std::size_t layers = timed;
        tensor::Tensor x = images;
        if (ranks > 1) {
          split = nn::split_spatially(whole, group);
          model = split.model.get();
          layers = split.split_layers;
          nn::take_band(images, comm.rank(), ranks, x);
        }
        // dy of the timed layers' output shape (the band's for the stack, (B, C, 1, 1) after the
        // ResNet's pool).
        tensor::Tensor dy =
            tensor::Tensor::empty(model->forward_range(x, ctx, {0, layers}).shape());
        dy.fill(0.01f);
        for (int i = -1; i < iterations; ++i) {
          comm.barrier();
          const std::int64_t sent = comm.stats().get("send").bytes_sent;
          auto start = Clock::now();
          double cpu = thread_cpu_seconds();
          model->forward_range(x, ctx, {0, layers});
          const double f = seconds_since(start), f_cpu = thread_cpu_seconds() - cpu;
          if (comm.rank() == 0) {
            halo_bytes = static_cast<double>(comm.stats().get("send").bytes_sent - sent);
          }
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
  return {slowest(forward), slowest(backward), slowest(forward_cpu), slowest(backward_cpu),
          halo_bytes};
}

}  // namespace

void check_spatial_benchmark(const SpatialBenchmarkOptions& options) {
  if (options.ranks.empty() || options.ranks.front() != 1) {
    throw ConfigError("bench spatial --ranks: the first rank count must be 1 (the baseline)");
  }
  if (options.model != "convs" && options.model != "resnet") {
    throw ConfigError(fmt::format(
        "bench spatial --model: \"{}\" is not a model of the benchmark; use convs or resnet",
        options.model));
  }
  // The ResNet's two stride-2 stages need bands whose rows divide by 4.
  const std::int64_t multiple = is_resnet(options) ? 4 : 1;
  for (const int p : options.ranks) {
    if (p < 1) throw ConfigError(fmt::format("bench spatial --ranks: {} is not >= 1", p));
    for (const std::int64_t r : options.resolutions) {
      if (r < 1 || r % (multiple * p) != 0) {
        throw ConfigError(fmt::format(
            "bench spatial: resolution {} does not split evenly over {} ranks{}; use resolutions "
            "that every --ranks value{} divides",
            r, p, is_resnet(options) ? " into bands of a multiple of 4 rows" : "",
            is_resnet(options) ? " times 4" : ""));
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
    synthetic.sample_shape = {is_resnet(options) ? 1 : options.channels, resolution, resolution};
    const data::Dataset images = data::make_synthetic(synthetic);
    auto whole = is_resnet(options) ? resnet(options, resolution) : conv_stack(options, resolution);
    // The ResNet is timed through its global pool: all but flatten and fc.
    const std::size_t timed = whole->layers().size() - (is_resnet(options) ? 2 : 0);
    const std::size_t kinds = options.ranks.size();
    std::vector<std::vector<PassTimes>> times(kinds);
    for (int round = 0; round < options.rounds; ++round) {
      for (std::size_t k = 0; k < kinds; ++k) {
        const std::size_t which = round % 2 == 0 ? k : kinds - 1 - k;
        times[which].push_back(
            measure(*whole, timed, images.images, options.ranks[which], options.iterations));
      }
    }
    const double flops = is_resnet(options)
                             ? resnet_flops(options, resolution)
                             : static_cast<double>(options.layers) * 2.0 *
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
      std::vector<double> halo;
      for (const PassTimes& mine : times[k]) halo.push_back(mine.halo_bytes);
      row.halo_bytes_forward_rank0 = median(halo);
      row.halo_bytes_per_layer =
          row.ranks > 1 && !is_resnet(options)
              ? 4.0 * static_cast<double>(options.batch * options.channels * resolution)
              : 0.0;
      if (on_row) on_row(row);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
