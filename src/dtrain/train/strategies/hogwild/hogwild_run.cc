#include "dtrain/train/strategies/hogwild/hogwild_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/timer.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/statistics.h"
#include "dtrain/train/strategies/hogwild/hogwild_engine.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

void check_resume(const TrainerOptions& options) {
  if (options.resume) {
    throw ConfigError(fmt::format(
        "--resume {}: a hogwild run keeps no checkpoints and cannot be resumed; start a new run "
        "with --config {}/resolved.toml",
        options.run_dir, options.run_dir));
  }
}

// Updates over the threads' summed CPU time: how fast one thread updates while the others run
// (falls below the one-thread figure when threads slow each other down, e.g. by cache-line
// traffic), whatever the machine's load.
double updates_per_cpu_second(std::int64_t updates, const std::vector<double>& cpu_seconds) {
  double total = 0.0;
  for (double seconds : cpu_seconds) total += seconds;
  return total > 0.0 ? static_cast<double>(updates) / total : 0.0;
}

void prepare_run_dir(const fs::path& dir, const Config& config) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create the run folder {}: {}; choose another --out",
                                  dir.string(), ec.message()));
  }
  if (fs::exists(dir / "metrics.jsonl")) {
    throw ConfigError(
        fmt::format("the run folder {} already holds a run (metrics.jsonl); choose another --out",
                    dir.string()));
  }
  write_file_atomically((dir / "resolved.toml").string(), to_toml(config));
}

}  // namespace

RunSummary run_hogwild(const Config& config, const TrainerOptions& options) {
  Stopwatch wall;
  validate(config);
  check_resume(options);
  check_hogwild_config(config);
  const TrainSection& t = config.train;
  const optim::LrSchedule schedule = hogwild_epoch_schedule(config);
  const int threads = static_cast<int>(config.parallel.workers);

  const HogwildData data = load_hogwild_data(config);
  HogwildEngine engine(config, data, threads);

  const fs::path dir(options.run_dir);
  prepare_run_dir(dir, config);
  MetricsLog metrics((dir / "metrics.jsonl").string(), false);
  Progress progress(options.out, Progress::detect_style(options.out, options.quiet), t.epochs);
  progress.message(
      fmt::format("dtrain: hogwild {} ({} parameters) on {} ({}), {} threads without locks, {} "
                  "epochs; run folder {}",
                  config.model.name, engine.parameters(), engine.dataset_name(),
                  engine.description(), threads, t.epochs, dir.string()));

  AccuracyTargets targets(t.accuracy_targets);
  std::int64_t updates = 0;
  double train_seconds = 0.0;
  double best_accuracy = 0.0;
  HogwildFigures last_train;
  std::optional<HogwildFigures> last_test;
  std::vector<double> epoch_rates;
  std::vector<std::int64_t> thread_updates(static_cast<std::size_t>(threads), 0);
  std::vector<double> thread_cpu_seconds(thread_updates.size(), 0.0);
  for (std::int64_t e = 0; e < t.epochs; ++e) {
    const auto lr = static_cast<float>(schedule.lr(e));
    const parallel::HogwildEpoch epoch = engine.run_epoch(e, lr);
    updates += epoch.updates;
    train_seconds += epoch.seconds;
    epoch_rates.push_back(epoch.updates_per_second);
    for (std::size_t i = 0; i < thread_updates.size(); ++i) {
      thread_updates[i] += epoch.thread_updates[i];
      thread_cpu_seconds[i] += epoch.thread_cpu_seconds[i];
    }
    last_train = engine.evaluate_train();
    last_test = engine.evaluate_test();
    const double accuracy = last_test ? last_test->accuracy : last_train.accuracy;
    best_accuracy = std::max(best_accuracy, accuracy);
    targets.observe(accuracy, train_seconds);

    EpochRecord record;
    record.epoch = e + 1;
    record.step = updates;
    record.train_loss = last_train.loss;
    record.train_accuracy = last_train.accuracy;
    record.test_loss = last_test ? last_test->loss : 0.0;
    record.test_accuracy = last_test ? last_test->accuracy : 0.0;
    record.samples_per_second = epoch.updates_per_second;
    record.epoch_seconds = epoch.seconds;
    record.train_seconds = train_seconds;
    record.elapsed = wall.seconds();
    nlohmann::json line = to_json(record);
    line["lr"] = lr;
    line["updates"] = epoch.updates;
    line["updates_per_second"] = epoch.updates_per_second;
    line["thread_updates"] = epoch.thread_updates;
    line["thread_cpu_seconds"] = epoch.thread_cpu_seconds;
    if (!last_test) {
      line["test_loss"] = nullptr;
      line["test_accuracy"] = nullptr;
    }
    metrics.write(line);
    progress.message(fmt::format(
        "epoch {}/{}  loss {:.4f}  train {:.2f}%{}  lr {:.4g}  {:.0f} updates/s  {:.3f} s", e + 1,
        t.epochs, last_train.loss, 100.0 * last_train.accuracy,
        last_test ? fmt::format("  test loss {:.4f}  test {:.2f}%", last_test->loss,
                                100.0 * last_test->accuracy)
                  : std::string(),
        lr, epoch.updates_per_second, epoch.seconds));
  }

  RunSummary summary;
  summary.model = config.model.name;
  summary.dataset = engine.dataset_name();
  summary.parameters = engine.parameters();
  summary.epochs = t.epochs;
  summary.steps = updates;
  summary.samples = updates;
  summary.final_train_loss = last_train.loss;
  summary.final_test_loss = last_test ? last_test->loss : last_train.loss;
  summary.final_test_accuracy = last_test ? last_test->accuracy : last_train.accuracy;
  summary.best_test_accuracy = best_accuracy;
  summary.wall_seconds = wall.seconds();
  summary.train_seconds = train_seconds;
  summary.train_samples_per_second =
      train_seconds > 0.0 ? static_cast<double>(updates) / train_seconds : 0.0;
  summary.time_to_accuracy = targets.to_json();
  summary.seed = t.seed;
  summary.threads = threads;
  summary.parallel = {
      {"strategy", "hogwild"},
      {"workers", threads},
      {"test_set", last_test.has_value()},
      {"accuracy_on", last_test ? "test" : "train"},
      {"updates", updates},
      {"updates_per_second", summary.train_samples_per_second},
      {"median_epoch_updates_per_second", median(epoch_rates)},
      {"epoch_updates_per_second", epoch_rates},
      {"thread_updates", thread_updates},
      {"thread_cpu_seconds", thread_cpu_seconds},
      {"updates_per_cpu_second", updates_per_cpu_second(updates, thread_cpu_seconds)},
      {"final_train_accuracy", last_train.accuracy}};
  summary.parallel.update(engine.details());
  write_summary((dir / "summary.json").string(), summary);
  progress.message(fmt::format(
      "done: {} accuracy {:.2f}% (best {:.2f}%), train loss {:.4f}, {:.0f} updates/s on {} "
      "threads; summary in {}",
      last_test ? "test" : "train", 100.0 * summary.final_test_accuracy,
      100.0 * summary.best_test_accuracy, summary.final_train_loss,
      summary.train_samples_per_second, threads, (dir / "summary.json").string()));
  return summary;
}

}  // namespace dtrain::train
