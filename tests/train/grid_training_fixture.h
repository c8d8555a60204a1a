// What the spatial, spatial-grid and hybrid training tests share on top of ParallelTrainingTest:
// every rank's parameters and buffers after thread ranks train a config; one worker's parameters;
// a grid's config turned back into plain data parallelism (the reference the grid must follow);
// a run's summary.json; the message of the ConfigError a run throws; and the images the spatial
// tests split: 96 synthetic images, the small ResNet on (1, 16, 8) ones, and the halo bytes that
// ResNet's convolutions send per step.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/train/trainer.h"
#include "parallel_training_fixture.h"

namespace dtrain::train::testing {

class GridTrainingTest : public ParallelTrainingTest {
 public:
  // 96 synthetic images (channels, height, width) of 3 classes, batch 12: 8 steps in one epoch,
  // SGD 0.05 / 0.9, ring allreduce; the caller sets the model and the strategy.
  static Config images_config(std::int64_t channels, std::int64_t height, std::int64_t width) {
    Config c;
    c.data.dataset = "synthetic";
    c.data.synthetic_samples = 96;
    c.data.synthetic_test_samples = 24;
    c.data.synthetic_classes = 3;
    c.data.synthetic_shape = {channels, height, width};
    c.data.synthetic_noise = 1.0;
    c.train.epochs = 1;
    c.train.batch_size = 12;
    c.train.seed = 5;
    c.train.log_every = 4;
    c.train.checkpoint_every = 0;
    c.optim.lr = 0.05;
    c.optim.momentum = 0.9;
    c.parallel.trace_steps = 0;
    c.parallel.allreduce = "ring";
    return c;
  }

  // The ResNet of model_resnet.cc (width 2, one block per stage: 1321 parameters, 1294 of them
  // before fc) on images_config's (1, 16, 8) images.
  static Config small_resnet_config() {
    Config c = images_config(1, 16, 8);
    c.model.name = "resnet";
    c.model.resnet_width = 2;
    c.model.resnet_blocks = 1;
    return c;
  }

  // The features of small_resnet_config's batch norms, in order (each allreduces 2F + 1 and 2F
  // doubles per batch under a spatial split).
  static constexpr std::array<std::int64_t, 9> kSmallResnetBatchNormFeatures{2, 2, 2, 4, 4,
                                                                             4, 8, 8, 8};

  // The halo bytes per step that one rank of a spatial group sends for small_resnet_config on b
  // images of 16 rows: 4 b C W ([above] bottom + [below] top) forward per convolution, top and
  // bottom swapped backward (not conv1, the first trainable layer), where `above` and `below` say
  // whether a rank holds the rows above or below this rank's.
  static double small_resnet_halo_bytes(double b, bool above, bool below) {
    struct Conv {
      double channels, width, top, bottom;
      bool backward;
    };
    const std::vector<Conv> convs{
        {1, 8, 1, 1, false},                                           // conv1
        {2, 8, 1, 1, true},  {2, 8, 1, 1, true},                       // stage 1
        {2, 8, 1, 0, true},  {4, 4, 1, 1, true}, {2, 8, 0, 0, true},   // stage 2
        {4, 4, 1, 0, true},  {8, 2, 1, 1, true}, {4, 4, 0, 0, true}};  // stage 3
    const double a = above, u = below;
    double halo = 0;
    for (const Conv& k : convs) {
      const double per_row = 4 * b * k.channels * k.width;
      halo += per_row * (a * k.bottom + u * k.top);
      if (k.backward) halo += per_row * (a * k.top + u * k.bottom);
    }
    return halo;
  }

  // `config` as plain data parallelism: the grid's sections (hybrid, pipeline, data_parallel) at
  // their defaults. On one rank it is the one worker a grid on the same global batch follows.
  static Config plain_data_parallel(Config config) {
    config.parallel.strategy = "data_parallel";
    config.hybrid = HybridSection{};
    config.pipeline = PipelineSection{};
    config.data_parallel = DataParallelSection{};
    return config;
  }

  // The parameters after one worker (no communicator) trains `config`; `make_model`, when set,
  // builds the model instead of model.name.
  std::vector<float> one_worker(const Config& config, const ModelFactory& make_model = nullptr) {
    TrainerOptions options{dir("single"), false, true, stderr, nullptr, nullptr};
    options.make_model = make_model;
    Trainer trainer(config, options);
    trainer.run();
    const auto& store = trainer.model().store();
    return {store.params(), store.params() + store.num_params()};
  }

  struct Ranks {
    std::vector<std::vector<float>> params, buffers;  // per rank
  };
  // Every rank's parameters and buffers after `ranks` thread ranks train `config` in `folder` (a
  // fresh one when empty), continuing its latest checkpoint when `resume`; `make_model` as in
  // one_worker. Nothing is compared between ranks here.
  Ranks train_ranks(Config config, int ranks, std::string folder = "", bool resume = false,
                    const ModelFactory& make_model = nullptr) {
    config.parallel.workers = ranks;
    if (folder.empty()) folder = dir("grid");
    Ranks out{std::vector<std::vector<float>>(static_cast<std::size_t>(ranks)),
              std::vector<std::vector<float>>(static_cast<std::size_t>(ranks))};
    comm::spawn_ranks(
        ranks,
        [&](comm::Communicator& comm) {
          ScopedComputePool pool(1);
          TrainerOptions options{folder, resume, true, stderr, nullptr, nullptr};
          options.comm = &comm;
          options.make_model = make_model;
          Trainer trainer(config, options);
          trainer.run();
          const auto& store = trainer.model().store();
          const auto r = static_cast<std::size_t>(comm.rank());
          out.params[r].assign(store.params(), store.params() + store.num_params());
          out.buffers[r].assign(store.buffers(), store.buffers() + store.num_buffer_elements());
        },
        comm_options());
    return out;
  }

  // The run's summary.json.
  static nlohmann::json summary_of(const std::string& run) {
    std::ifstream in(std::filesystem::path(run) / "summary.json");
    return nlohmann::json::parse(in);
  }

  // The message of the ConfigError that `run` throws, or "no error".
  static std::string config_error_of(const std::function<void()>& run) {
    try {
      run();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "no error";
  }
};

}  // namespace dtrain::train::testing
