#include "dtrain/train/strategies/hogwild/hogwild_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/timer.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/progress.h"
#include "dtrain/train/resume_records.h"
#include "dtrain/train/statistics.h"
#include "dtrain/train/strategies/hogwild/hogwild_engine.h"

namespace dtrain::train {
namespace {

namespace fs = std::filesystem;

// Checks that `checkpoint` holds the parameters of `engine`'s model; CheckpointError naming the
// file and the first tensor that differs otherwise.
void check_hogwild_layout(const Checkpoint& checkpoint, const HogwildEngine& engine,
                          const std::string& path) {
  const std::vector<nn::ParamEntry> mine = engine.param_entries();
  const auto& theirs = checkpoint.param_table;
  for (std::size_t i = 0; i < std::max(mine.size(), theirs.size()); ++i) {
    const bool same = i < mine.size() && i < theirs.size() && mine[i].name == theirs[i].name &&
                      mine[i].shape == theirs[i].shape && mine[i].offset == theirs[i].offset;
    if (!same) {
      throw CheckpointError(fmt::format(
          "checkpoint {}: parameter {} is {} in the checkpoint but {} in the model; resume with "
          "the configuration the checkpoint was written with",
          path, i,
          i < theirs.size()
              ? fmt::format("{} {}", theirs[i].name, tensor::shape_str(theirs[i].shape))
              : std::string("missing"),
          i < mine.size() ? fmt::format("{} {}", mine[i].name, tensor::shape_str(mine[i].shape))
                          : std::string("missing")));
    }
  }
  if (std::ssize(checkpoint.params) != engine.parameters() || !checkpoint.buffers.empty()) {
    throw CheckpointError(fmt::format(
        "checkpoint {}: {} parameters and {} buffer values, the hogwild model has {} and none",
        path, checkpoint.params.size(), checkpoint.buffers.size(), engine.parameters()));
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

void prepare_run_dir(const fs::path& dir, bool resume) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    throw ConfigError(fmt::format("cannot create the run folder {}: {}; choose another --out",
                                  dir.string(), ec.message()));
  }
  if (!resume && fs::exists(dir / "metrics.jsonl")) {
    throw ConfigError(fmt::format(
        "the run folder {} already holds a run (metrics.jsonl); continue it with --resume {} or "
        "choose another --out",
        dir.string(), dir.string()));
  }
}

}  // namespace

RunSummary run_hogwild(const Config& config, const TrainerOptions& options) {
  Stopwatch wall;
  validate(config);
  check_hogwild_config(config);
  const TrainSection& t = config.train;
  const optim::LrSchedule schedule = hogwild_epoch_schedule(config);
  const int threads = static_cast<int>(config.parallel.workers);

  const HogwildData data = load_hogwild_data(config);
  HogwildEngine engine(config, data, threads);

  const fs::path dir(options.run_dir);
  prepare_run_dir(dir, options.resume);
  CheckpointDir checkpoints((dir / "checkpoints").string(), t.keep_checkpoints);
  AccuracyTargets targets(t.accuracy_targets);
  std::int64_t start_epoch = 0;
  std::int64_t updates = 0;
  double train_seconds = 0.0;
  double previous_wall = 0.0;
  double best_accuracy = 0.0;
  HogwildFigures last_train;
  std::optional<HogwildFigures> last_test;
  // As the Trainer does (trainer.cc): a run stopped before its first checkpoint starts over, and
  // one stopped after its last but before summary.json writes the summary from it.
  bool resume = options.resume;
  if (resume && !checkpoints.has_any()) {
    resume = false;
    log::info(
        "{} holds no checkpoint yet (the run stopped before its first): training it from "
        "the beginning",
        (dir / "checkpoints").string());
    drop_records_after((dir / "metrics.jsonl").string(), 0);
  }
  if (resume) {
    // The shared parameters as the checkpoint's epoch left them (plain SGD keeps no other state).
    const VerifiedCheckpoint verified = checkpoints.newest_good();
    const Checkpoint& checkpoint = verified.checkpoint;
    if (checkpoint.seed != static_cast<std::uint64_t>(t.seed)) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written with train.seed = {} but the run's resolved.toml says {}",
          verified.path, checkpoint.seed, t.seed));
    }
    check_hogwild_layout(checkpoint, engine, verified.path);
    if (checkpoint.sampler_position != 0) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written inside epoch {}; a hogwild run resumes at epoch ends only",
          verified.path, checkpoint.sampler_epoch + 1));
    }
    std::copy(checkpoint.params.begin(), checkpoint.params.end(), engine.weights().begin());
    start_epoch = checkpoint.sampler_epoch;
    updates = static_cast<std::int64_t>(checkpoint.scalar("samples", 0.0));
    train_seconds = checkpoint.scalar("train_seconds", 0.0);
    previous_wall = checkpoint.scalar("wall_seconds", 0.0);
    best_accuracy = checkpoint.scalar("best_test_accuracy", 0.0);
    last_train.loss = checkpoint.scalar("final_train_loss", 0.0);
    last_train.accuracy = checkpoint.scalar("final_train_accuracy", 0.0);
    last_test = engine.evaluate_test();  // of the checkpoint's parameters: its epoch's figures
    restore_accuracy_targets(checkpoint, targets);
    if (start_epoch >= t.epochs && !fs::exists(dir / "summary.json")) {
      log::info(
          "{} is the run's last checkpoint and summary.json is missing: writing the summary "
          "from it",
          verified.path);
    } else if (start_epoch >= t.epochs) {
      throw ConfigError(fmt::format(
          "checkpoint {} is at epoch {} and train.epochs = {}: nothing left to train; pass "
          "--epochs N with N > {} to train further",
          verified.path, start_epoch, t.epochs, start_epoch));
    }
    drop_records_after((dir / "metrics.jsonl").string(), start_epoch);
  }
  write_file_atomically((dir / "resolved.toml").string(), to_toml(config));
  MetricsLog metrics((dir / "metrics.jsonl").string(), resume);
  Progress progress(options.out, Progress::detect_style(options.out, options.quiet), t.epochs);
  progress.message(
      fmt::format("dtrain: hogwild {} ({} parameters) on {} ({}), {} threads without locks, {} "
                  "epochs; run folder {}",
                  config.model.name, engine.parameters(), engine.dataset_name(),
                  engine.description(), threads, t.epochs, dir.string()));
  progress.message(
      fmt::format("checkpoints: the shared parameters {}, once the epoch's threads joined",
                  t.checkpoint_every > 0
                      ? fmt::format("every {} epoch(s) and after the last", t.checkpoint_every)
                      : std::string("after the last epoch")));
  if (resume) {
    progress.message(fmt::format("resuming at epoch {} ({} updates)", start_epoch + 1, updates));
  }
  auto elapsed = [&] { return previous_wall + wall.seconds(); };
  // At an epoch end, with every thread joined: the parameters are exactly what the epoch wrote.
  auto save = [&](std::int64_t epochs_done) {
    Checkpoint c;
    c.epoch = epochs_done;
    c.global_step = updates;
    c.optimizer_steps = 0;  // plain SGD: no optimizer state
    c.seed = static_cast<std::uint64_t>(t.seed);
    c.sampler_epoch = epochs_done;
    c.sampler_position = 0;
    c.scalars = {{"samples", static_cast<double>(updates)},
                 {"train_seconds", train_seconds},
                 {"wall_seconds", elapsed()},
                 {"best_test_accuracy", best_accuracy},
                 {"final_test_loss", last_test ? last_test->loss : 0.0},
                 {"final_test_accuracy", last_test ? last_test->accuracy : 0.0},
                 {"final_train_loss", last_train.loss},
                 {"final_train_accuracy", last_train.accuracy}};
    save_accuracy_targets(targets, c);
    c.param_table = engine.param_entries();
    const std::span<float> weights = engine.weights();
    c.params.assign(weights.begin(), weights.end());
    return checkpoints.save(c);
  };

  std::vector<double> epoch_rates;
  std::vector<std::int64_t> thread_updates(static_cast<std::size_t>(threads), 0);
  std::vector<double> thread_cpu_seconds(thread_updates.size(), 0.0);
  for (std::int64_t e = start_epoch; e < t.epochs; ++e) {
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
    record.elapsed = elapsed();
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
    // SIGTERM / SIGINT (base/stop_request.h): the threads share no step to stop at, so the run
    // stops at the epoch's end with a checkpoint there.
    const int signal = stop_requested();
    std::string saved;
    if (e + 1 == t.epochs || signal != 0 ||
        (t.checkpoint_every > 0 && (e + 1) % t.checkpoint_every == 0)) {
      saved = save(e + 1);
    }
    if (signal != 0 && e + 1 < t.epochs) {
      log::warn(
          "stopped by {} after epoch {} of {}: checkpoint {}; continue with `dtrain train "
          "--resume {}`",
          stop_signal_name(signal), e + 1, t.epochs, saved, dir.string());
      RunSummary stopped;
      stopped.stopped_by_signal = signal;
      return stopped;
    }
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
  summary.wall_seconds = elapsed();
  summary.resumed_from_epoch = start_epoch;
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
