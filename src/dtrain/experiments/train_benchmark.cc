#include "dtrain/experiments/train_benchmark.h"

#include <algorithm>
#include <numeric>

#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"
#include "dtrain/data/dataset.h"
#include "dtrain/train/config.h"
#include "dtrain/train/statistics.h"
#include "dtrain/train/trainer.h"

namespace dtrain::experiments {

// Written inside dtrain::train before the experiments left it; its names read unqualified here.
using namespace dtrain::train;  // NOLINT(google-build-using-namespace)
namespace {

// Enough distinct batches that the inputs are not all in L1, few enough to build in a blink.
constexpr std::int64_t kBatchesInMemory = 8;

Config benchmark_config(const std::string& model, int threads, std::int64_t batch) {
  Config config;
  config.model.name = model;
  config.data.dataset = "synthetic";
  config.data.synthetic_shape = {1, 28, 28};
  config.data.synthetic_classes = 10;
  config.data.synthetic_samples = batch * kBatchesInMemory;
  config.data.synthetic_test_samples = 1;
  config.train.batch_size = batch;
  config.train.threads = threads;
  config.optim.name = "sgd";
  // A small learning rate keeps the parameters finite however long the benchmark runs: a NaN
  // would change the speed of every kernel after it.
  config.optim.lr = 0.01;
  config.optim.momentum = 0.9;
  if (model == "lenet5") config.model.init = "xavier";
  if (model == "gpt") {
    // ../shared/peers/scripts/train_charlm.py's model and recipe: 4 blocks, 4 heads, width 128,
    // context 128 bytes of Debian's fortunes, AdamW (0.9, 0.95), weight decay 0.1.
    config.data.dataset = "text";
    config.data.path = "/usr/share/games/fortunes";
    config.data.block = 128;
    config.data.text_windows = batch * kBatchesInMemory;
    config.data.text_test_windows = 1;
    config.optim.name = "adamw";
    config.optim.lr = 1e-3;
    config.optim.momentum = 0.0;
    config.optim.beta2 = 0.95;
    config.optim.weight_decay = 0.1;
  }
  return config;
}

}  // namespace

std::vector<TrainBenchmarkRow> run_train_benchmark(
    const TrainBenchmarkOptions& options,
    const std::function<void(const TrainBenchmarkRow&)>& on_row) {
  if (options.batch < 1 || options.steps < 1 || options.repeats < 1 || options.warmup_steps < 0) {
    throw ConfigError(fmt::format(
        "bench train: batch, steps and repeats must be >= 1 and warmup >= 0 (got batch {}, steps "
        "{}, repeats {}, warmup {})",
        options.batch, options.steps, options.repeats, options.warmup_steps));
  }
  std::vector<TrainBenchmarkRow> rows;
  for (const auto& model : options.models) {
    for (int threads : options.threads) {
      TrainerOptions trainer_options;
      trainer_options.quiet = true;
      Trainer trainer(benchmark_config(model, threads, options.batch), trainer_options);

      // The batches, gathered once: the benchmark measures the step, not the data copy.
      const data::Dataset& train_set = trainer.train_data();
      std::vector<tensor::Tensor> inputs(kBatchesInMemory);
      std::vector<std::vector<std::int32_t>> labels(kBatchesInMemory);
      std::vector<std::int64_t> indices(static_cast<std::size_t>(options.batch));
      for (std::int64_t b = 0; b < kBatchesInMemory; ++b) {
        std::iota(indices.begin(), indices.end(), b * options.batch);
        data::gather_batch(train_set, indices, inputs[static_cast<std::size_t>(b)],
                           labels[static_cast<std::size_t>(b)]);
      }
      std::int64_t step = 0;
      auto run_steps = [&](std::int64_t count) {
        for (std::int64_t i = 0; i < count; ++i, ++step) {
          const auto b = static_cast<std::size_t>(step % kBatchesInMemory);
          trainer.train_step(inputs[b], labels[b], step, nullptr);
        }
      };
      run_steps(options.warmup_steps);
      std::vector<double> rates;
      for (int r = 0; r < options.repeats; ++r) {
        Stopwatch watch;
        run_steps(options.steps);
        rates.push_back(static_cast<double>(options.steps * options.batch) / watch.seconds());
      }
      TrainBenchmarkRow row;
      row.model = model;
      row.threads = threads;
      row.batch = options.batch;
      row.parameters = trainer.model().store().num_params();
      row.steps = options.steps;
      row.repeats = options.repeats;
      row.samples_per_second = median(rates);
      row.samples_per_second_min = *std::min_element(rates.begin(), rates.end());
      row.samples_per_second_max = *std::max_element(rates.begin(), rates.end());
      row.step_ms = 1e3 * static_cast<double>(options.batch) / row.samples_per_second;
      row.tokens_per_sample = train_set.labels_per_sample;
      if (on_row) on_row(row);
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace dtrain::experiments
