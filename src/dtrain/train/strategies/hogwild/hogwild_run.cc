#include "dtrain/train/strategies/hogwild/hogwild_run.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/stop_request.h"
#include "dtrain/base/timer.h"
#include "dtrain/comm/communicator.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/train/atomic_file.h"
#include "dtrain/train/checkpoint.h"
#include "dtrain/train/checkpoint_dir.h"
#include "dtrain/train/checkpoint_writer.h"
#include "dtrain/train/memory_budget.h"
#include "dtrain/train/memory_checkpoint.h"
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
  // The linear models' shared weights and the checkpoint's copies of them (memory_budget.h),
  // refused before they are allocated when they cannot fit.
  if (data.sparse_train) {
    MemoryNeed need;
    need.parameters = data.sparse_train->num_features;
    need.gradients = false;
    need.checkpoint_copies = checkpoint_copies(config);
    need.memory_tier = t.memory_checkpoint_every_steps > 0;
    for (const std::optional<data::SparseDataset>* set : {&data.sparse_train, &data.sparse_test}) {
      if (!set->has_value()) continue;
      const data::SparseDataset& d = **set;
      need.data_bytes += static_cast<std::int64_t>(
          d.row_offsets.size() * sizeof(std::int64_t) + d.columns.size() * sizeof(std::int32_t) +
          (d.values.size() + d.labels.size()) * sizeof(float));
    }
    check_memory_need(need);
  }
  HogwildEngine engine(config, data, threads);

  const fs::path dir(options.run_dir);
  prepare_run_dir(dir, options.resume);
  CheckpointDir checkpoints((dir / "checkpoints").string(), t.keep_checkpoints);
  AccuracyTargets targets(t.accuracy_targets);
  std::int64_t start_epoch = 0;
  std::int64_t start_position = 0;  // samples of start_epoch's order trained before (a resume)
  double carried_epoch_seconds = 0.0;
  std::int64_t updates = 0;
  // Thread 0's steps over the run (chunks of the linear engine, mini-batches of the dense one):
  // what train.checkpoint_every_steps and memory_checkpoint_every_steps count.
  std::int64_t thread0_steps = 0;
  double train_seconds = 0.0;
  double previous_wall = 0.0;
  double best_accuracy = 0.0;
  HogwildFigures last_train;
  std::optional<HogwildFigures> last_test;
  // Tier 1 (memory_checkpoint.h): the threads are one process, so always on one host.
  std::optional<MemoryCheckpoint> memory;
  if (t.memory_checkpoint_every_steps > 0) {
    memory.emplace(dir.string(), t.memory_checkpoint_folder);
  }
  MemoryCheckpoint* const memory_tier = memory ? &*memory : nullptr;
  // As the Trainer does (trainer.cc): a run stopped before its first checkpoint starts over, and
  // one stopped after its last but before summary.json writes the summary from it.
  bool resume = options.resume;
  if (resume && !has_any_checkpoint(checkpoints, memory_tier)) {
    resume = false;
    log::info(
        "{} holds no checkpoint yet (the run stopped before its first): training it from "
        "the beginning",
        (dir / "checkpoints").string());
    drop_records_after((dir / "metrics.jsonl").string(), 0);
  }
  if (!resume && memory_tier != nullptr) memory_tier->remove();
  if (resume) {
    // The shared parameters as the checkpoint left them (plain SGD keeps no other state), at an
    // epoch's end or at a pause inside one.
    const VerifiedCheckpoint verified = newest_checkpoint(checkpoints, memory_tier);
    const Checkpoint& checkpoint = verified.checkpoint;
    if (checkpoint.seed != static_cast<std::uint64_t>(t.seed)) {
      throw CheckpointError(fmt::format(
          "checkpoint {} was written with train.seed = {} but the run's resolved.toml says {}",
          verified.path, checkpoint.seed, t.seed));
    }
    check_hogwild_layout(checkpoint, engine, verified.path);
    std::copy(checkpoint.params.begin(), checkpoint.params.end(), engine.weights().begin());
    start_epoch = checkpoint.sampler_epoch;
    start_position = checkpoint.sampler_position;
    if (start_position > 0) carried_epoch_seconds = checkpoint.scalar("epoch_seconds", 0.0);
    thread0_steps = static_cast<std::int64_t>(checkpoint.scalar("thread0_steps", 0.0));
    updates = static_cast<std::int64_t>(checkpoint.scalar("samples", 0.0));
    train_seconds = checkpoint.scalar("train_seconds", 0.0);
    previous_wall = checkpoint.scalar("wall_seconds", 0.0);
    best_accuracy = checkpoint.scalar("best_test_accuracy", 0.0);
    last_train.loss = checkpoint.scalar("final_train_loss", 0.0);
    last_train.accuracy = checkpoint.scalar("final_train_accuracy", 0.0);
    last_test = engine.evaluate_test();  // of the checkpoint's parameters: its epoch's figures
    restore_accuracy_targets(checkpoint, targets);
    // Past the end as configured (fewer --epochs than done): refused before anything is
    // rewritten; exactly the end with summary.json missing: the summary is written from it.
    if (start_epoch > t.epochs || (start_epoch == t.epochs && start_position > 0)) {
      throw ConfigError(fmt::format(
          "--resume {}: the newest checkpoint {} is past --epochs {} ({} epoch{} done{}); give "
          "--epochs {} or more to continue it",
          dir.string(), verified.path, t.epochs, start_epoch, start_epoch == 1 ? "" : "s",
          start_position > 0
              ? fmt::format(", then {} samples of epoch {}", start_position, start_epoch + 1)
              : std::string(),
          start_epoch + 1));
    }
    if (start_epoch == t.epochs && !fs::exists(dir / "summary.json")) {
      log::info(
          "{} is the run's last checkpoint and summary.json is missing: writing the summary "
          "from it",
          verified.path);
    } else if (start_epoch == t.epochs) {
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
  const bool on_a_clock = t.checkpoint_every_seconds > 0.0 || t.mtbf_hours > 0.0;
  std::string inside;
  if (t.checkpoint_every_steps > 0) {
    inside = fmt::format("every {} steps of thread 0", t.checkpoint_every_steps);
  }
  if (on_a_clock) {
    inside += fmt::format("{}{}", inside.empty() ? "" : " and ",
                          t.checkpoint_every_seconds > 0.0
                              ? fmt::format("every {:g} s", t.checkpoint_every_seconds)
                              : std::string("every sqrt(2 C MTBF) s (Young/Daly)"));
  }
  if (memory_tier != nullptr) {
    inside += fmt::format("{}in memory every {} steps of thread 0 ({})", inside.empty() ? "" : "; ",
                          t.memory_checkpoint_every_steps, memory_tier->path());
  }
  progress.message(fmt::format(
      "checkpoints: the shared parameters {}, once the epoch's threads joined{}",
      t.checkpoint_every > 0
          ? fmt::format("every {} epoch(s) and after the last", t.checkpoint_every)
          : std::string("after the last epoch"),
      inside.empty()
          ? std::string()
          : fmt::format("; inside epochs {}, the threads paused at a step boundary", inside)));
  if (resume) {
    progress.message(fmt::format("resuming at epoch {} ({} updates{})", start_epoch + 1, updates,
                                 start_position > 0
                                     ? fmt::format(", sample {} of the epoch", start_position)
                                     : std::string()));
  }
  auto elapsed = [&] { return previous_wall + wall.seconds(); };
  // Checkpoint files are written by a thread of their own (checkpoint_writer.h) from a copy of the
  // shared parameters: a pause inside an epoch lasts for that copy only.
  CheckpointWriter writer(checkpoints);
  double snapshot_seconds = 0.0;
  // `epochs_done` whole epochs and `position` samples of the next; `epoch_seconds`: that epoch's
  // so far. Taken with every thread joined (an epoch's end) or waiting (a pause).
  auto snapshot = [&](std::int64_t epochs_done, std::int64_t position, std::int64_t samples,
                      double seconds_trained, double epoch_seconds) {
    Checkpoint c;
    c.epoch = epochs_done;
    c.global_step = samples;
    c.optimizer_steps = 0;  // plain SGD: no optimizer state
    c.seed = static_cast<std::uint64_t>(t.seed);
    c.sampler_epoch = epochs_done;
    c.sampler_position = position;
    c.scalars = {{"samples", static_cast<double>(samples)},
                 {"train_seconds", seconds_trained},
                 {"wall_seconds", elapsed()},
                 {"best_test_accuracy", best_accuracy},
                 {"final_test_loss", last_test ? last_test->loss : 0.0},
                 {"final_test_accuracy", last_test ? last_test->accuracy : 0.0},
                 {"final_train_loss", last_train.loss},
                 {"final_train_accuracy", last_train.accuracy},
                 {"thread0_steps", static_cast<double>(thread0_steps)}};
    if (position > 0) c.scalars.push_back({"epoch_seconds", epoch_seconds});
    save_accuracy_targets(targets, c);
    c.param_table = engine.param_entries();
    const std::span<float> weights = engine.weights();
    c.params.assign(weights.begin(), weights.end());
    return c;
  };
  // Checkpoints inside an epoch (parallel/hogwild.h, HogwildPause): due by thread 0's step count
  // or its clock (checkpoint_every_seconds, or Young/Daly's sqrt(2 C MTBF) with C the last
  // checkpoint's snapshot + write seconds; before the first, its bytes at 500 MB/s), or at a stop
  // signal; the memory tier by thread 0's step count.
  const double first_cost = 1e-3 + static_cast<double>(engine.parameters()) * 4.0 / 500e6;
  Stopwatch since_checkpoint;
  bool disk_pending = false;
  bool memory_pending = false;
  bool saved_at_stop = false;
  auto interval_seconds = [&] {
    if (t.checkpoint_every_seconds > 0.0) return t.checkpoint_every_seconds;
    if (t.mtbf_hours <= 0.0) return 0.0;
    const auto written = writer.last_write();
    const double cost = written ? snapshot_seconds + written->second : first_cost;
    return std::sqrt(2.0 * cost * t.mtbf_hours * 3600.0);
  };
  const comm::CommOptions deadlines;
  // The epoch in flight, for a pause's snapshot: its index (where it started: start_position).
  std::int64_t current_epoch = 0;
  parallel::HogwildPause pause;
  pause.timeout = config.parallel.comm_timeout_seconds > 0.0
                      ? std::chrono::milliseconds(static_cast<std::int64_t>(
                            config.parallel.comm_timeout_seconds * 1000.0))
                      : deadlines.timeout;
  pause.due = [&] {
    ++thread0_steps;
    const bool steps =
        t.checkpoint_every_steps > 0 && thread0_steps % t.checkpoint_every_steps == 0;
    const double interval = on_a_clock ? interval_seconds() : 0.0;
    disk_pending =
        disk_pending || steps || (interval > 0.0 && since_checkpoint.seconds() >= interval);
    memory_pending = memory_pending || (memory_tier != nullptr &&
                                        thread0_steps % t.memory_checkpoint_every_steps == 0);
    return disk_pending || memory_pending || stop_requested() != 0;
  };
  pause.at_pause = [&](std::int64_t position, double seconds) {
    const int signal = stop_requested();
    if (signal == 0 && !disk_pending && !memory_pending) return false;
    Stopwatch clock;
    const std::int64_t first = current_epoch == start_epoch ? start_position : 0;
    const double carried = current_epoch == start_epoch ? carried_epoch_seconds : 0.0;
    Checkpoint c = snapshot(current_epoch, position, updates + position - first,
                            train_seconds + seconds, carried + seconds);
    if (signal != 0 || disk_pending) {
      snapshot_seconds = clock.seconds();
      writer.submit(std::move(c), /*fatal=*/signal != 0);
      since_checkpoint.reset();
      disk_pending = memory_pending = false;
      saved_at_stop = signal != 0;
    } else {
      try {
        memory_tier->save(c);
      } catch (const CheckpointError& e) {
        log::warn("{}; memory checkpoints are off for this run", e.what());
      }
      memory_pending = false;
    }
    return signal != 0;
  };

  std::vector<double> epoch_rates;
  std::vector<std::int64_t> thread_updates(static_cast<std::size_t>(threads), 0);
  std::vector<double> thread_cpu_seconds(thread_updates.size(), 0.0);
  for (std::int64_t e = start_epoch; e < t.epochs; ++e) {
    const auto lr = static_cast<float>(schedule.lr(e));
    const std::int64_t first = e == start_epoch ? start_position : 0;
    current_epoch = e;
    // Always with pauses: a stop signal pauses too, whatever the keys (one check per step).
    const parallel::HogwildEpoch epoch = engine.run_epoch(e, lr, first, &pause);
    updates += epoch.updates;
    train_seconds += epoch.seconds;
    epoch_rates.push_back(epoch.updates_per_second);
    for (std::size_t i = 0; i < thread_updates.size(); ++i) {
      thread_updates[i] += epoch.thread_updates[i];
      thread_cpu_seconds[i] += epoch.thread_cpu_seconds[i];
    }
    if (epoch.stopped) {
      // A stop inside the epoch: its checkpoint was taken at the pause.
      writer.wait();
      if (memory_tier != nullptr && saved_at_stop) memory_tier->remove();
      const auto written = writer.last_write();
      log::warn(
          "stopped by {} inside epoch {} of {} (after sample {} of its order): checkpoint {}; "
          "continue with `dtrain train --resume {}`",
          stop_signal_name(stop_requested()), e + 1, t.epochs, epoch.position,
          written ? written->first : std::string("(none)"), dir.string());
      RunSummary stopped;
      stopped.stopped_by_signal = stop_requested();
      return stopped;
    }
    last_train = engine.evaluate_train();
    last_test = engine.evaluate_test();
    const double accuracy = last_test ? last_test->accuracy : last_train.accuracy;
    best_accuracy = std::max(best_accuracy, accuracy);
    targets.observe(accuracy, train_seconds);

    const double epoch_seconds = (e == start_epoch ? carried_epoch_seconds : 0.0) + epoch.seconds;
    EpochRecord record;
    record.epoch = e + 1;
    record.step = updates;
    record.train_loss = last_train.loss;
    record.train_accuracy = last_train.accuracy;
    record.test_loss = last_test ? last_test->loss : 0.0;
    record.test_accuracy = last_test ? last_test->accuracy : 0.0;
    record.samples_per_second = epoch.updates_per_second;
    record.epoch_seconds = epoch_seconds;
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
    // SIGTERM / SIGINT (base/stop_request.h) that came during the epoch's last step: the run stops
    // at the epoch's end with a checkpoint there. A step or clock checkpoint due at the epoch's
    // last step is this epoch checkpoint.
    const int signal = stop_requested();
    const bool last = e + 1 == t.epochs;
    if (last || signal != 0 || disk_pending ||
        (t.checkpoint_every > 0 && (e + 1) % t.checkpoint_every == 0)) {
      Stopwatch clock;
      Checkpoint c = snapshot(e + 1, 0, updates, train_seconds, 0.0);
      snapshot_seconds = clock.seconds();
      writer.submit(std::move(c), /*fatal=*/last || signal != 0);
      since_checkpoint.reset();
      disk_pending = memory_pending = false;
    } else if (memory_pending) {
      try {
        memory_tier->save(snapshot(e + 1, 0, updates, train_seconds, 0.0));
      } catch (const CheckpointError& error) {
        log::warn("{}; memory checkpoints are off for this run", error.what());
      }
      memory_pending = false;
    }
    if (signal != 0 && !last) {
      writer.wait();
      if (memory_tier != nullptr) memory_tier->remove();
      const auto written = writer.last_write();
      log::warn(
          "stopped by {} after epoch {} of {}: checkpoint {}; continue with `dtrain train "
          "--resume {}`",
          stop_signal_name(signal), e + 1, t.epochs,
          written ? written->first : std::string("(none)"), dir.string());
      RunSummary stopped;
      stopped.stopped_by_signal = signal;
      return stopped;
    }
  }
  writer.wait();  // the last checkpoint is on disk before the run reports anything
  if (memory_tier != nullptr) memory_tier->remove();

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
