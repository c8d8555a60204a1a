// Training-step throughput: samples/s of forward + loss + backward + optimizer update, with the
// data already in memory (what `dtrain bench train` prints and docs/PERFORMANCE.md records).
//
// Every row runs the Trainer's own train_step on a synthetic data set of Fashion-MNIST's shape
// (1, 28, 28) and 10 classes, with SGD and momentum as in ../shared/peers/scripts/train_fmnist.py,
// so the figure is the trainer's, not a special benchmark loop's; "gpt" trains on windows of 128
// bytes of Debian's fortunes with AdamW, as ../shared/peers/scripts/train_charlm.py does (a sample
// is a window: tokens/s = samples/s x 128). Each row: `warmup_steps` untimed
// steps, then `repeats` timed runs of `steps` steps; the row reports their median samples/s.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::experiments {

struct TrainBenchmarkOptions {
  std::vector<std::string> models{"mlp", "lenet5"};  // model.name values
  std::vector<int> threads{1, 2};
  std::int64_t batch = 128;
  std::int64_t steps = 100;  // timed steps per repeat
  std::int64_t warmup_steps = 20;
  int repeats = 5;
};

struct TrainBenchmarkRow {
  std::string model;
  int threads = 1;
  std::int64_t batch = 0;
  std::int64_t parameters = 0;
  std::int64_t steps = 0;
  int repeats = 0;
  double samples_per_second = 0.0;      // median over repeats
  double samples_per_second_min = 0.0;  // slowest repeat
  double samples_per_second_max = 0.0;  // fastest repeat
  double step_ms = 0.0;                 // median time per step
  std::int64_t tokens_per_sample = 1;   // gpt: the window (tokens/s = samples/s x this)
};

// Runs one row at a time; on_row (when set) is called as each row finishes, for progress output.
std::vector<TrainBenchmarkRow> run_train_benchmark(
    const TrainBenchmarkOptions& options,
    const std::function<void(const TrainBenchmarkRow&)>& on_row = {});

}  // namespace dtrain::experiments
