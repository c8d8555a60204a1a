// What a run reports: metrics.jsonl (one JSON object per line, appended as the run goes, so a
// crashed or running job can be plotted), summary.json (written at the end) and time to accuracy.
//
// Time to accuracy follows the peer measurement (../shared/peers/scripts/train_fmnist.py): the
// clock is training time only (forward, loss, backward, update, batch copies), paused while the
// test set is evaluated, and a target is reached at the first evaluation whose test accuracy is
// >= the target.
#pragma once

#include <cstdint>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::train {

// {"kind":"step", ...}: every train.log_every steps.
struct StepRecord {
  std::int64_t epoch = 0;  // 1-based epoch the step belongs to
  std::int64_t step = 0;   // global step count after this step
  double loss = 0.0;       // mean loss of the steps since the previous record
  double lr = 0.0;
  double samples_per_second = 0.0;  // over the steps since the previous record, training time
  double elapsed = 0.0;             // wall seconds since the run (or the resumed run) started
};

// {"kind":"eval", ...}: a test evaluation inside an epoch (train.eval_every_steps).
struct EvalRecord {
  std::int64_t epoch = 0;
  std::int64_t step = 0;
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double train_seconds = 0.0;
  double elapsed = 0.0;
};

// {"kind":"epoch", ...}: every epoch end.
struct EpochRecord {
  std::int64_t epoch = 0;  // 1-based
  std::int64_t step = 0;
  double train_loss = 0.0;      // sample-weighted mean over the epoch
  double train_accuracy = 0.0;  // on the training batches as they were trained on
  double test_loss = 0.0;
  double test_accuracy = 0.0;
  double samples_per_second = 0.0;  // epoch samples / epoch training seconds
  double epoch_seconds = 0.0;       // training seconds of this epoch (evaluation excluded)
  double train_seconds = 0.0;       // training seconds of the run so far
  double elapsed = 0.0;
};

nlohmann::json to_json(const StepRecord& record);
nlohmann::json to_json(const EvalRecord& record);
nlohmann::json to_json(const EpochRecord& record);

// Appends records to metrics.jsonl, one line each, each handed to the system at once (one write
// call per line, no user-space buffer). metrics.jsonl is a diagnostic: a line that cannot be
// written (full disk) is taken back out (the file is truncated to its last whole line), the first
// such failure is one warning, and the run goes on; the records that could not be written are lost.
class MetricsLog {
 public:
  // append: continue an existing file (a resumed run) instead of starting a new one. A file that
  // cannot be opened is a dtrain::Error: that happens before any training, so it costs nothing.
  MetricsLog(const std::string& path, bool append);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  // Records that could not be written so far.
  std::int64_t lost() const { return lost_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t lost_ = 0;
};

// The first training time at which each target accuracy was reached.
class AccuracyTargets {
 public:
  explicit AccuracyTargets(std::vector<double> targets);

  // Records one evaluation; a target not yet reached and <= accuracy is reached at train_seconds.
  void observe(double accuracy, double train_seconds);
  const std::vector<double>& targets() const { return targets_; }
  const std::vector<std::optional<double>>& reached() const { return reached_; }
  // For resuming: the stored state of target i.
  void set_reached(std::size_t i, std::optional<double> seconds) { reached_.at(i) = seconds; }

  // {"0.85": 12.3, "0.88": null}: keys are the targets in shortest form.
  nlohmann::json to_json() const;
  // The key of target i ("0.85").
  static std::string key(double target);

 private:
  std::vector<double> targets_;
  std::vector<std::optional<double>> reached_;
};

// summary.json.
struct RunSummary {
  std::string model;
  std::string dataset;
  std::int64_t parameters = 0;
  std::int64_t epochs = 0;
  std::int64_t steps = 0;
  std::int64_t samples = 0;  // training samples processed
  double final_train_loss = 0.0;
  double final_test_loss = 0.0;
  double final_test_accuracy = 0.0;
  double best_test_accuracy = 0.0;
  double wall_seconds = 0.0;   // whole run, evaluation and start-up included
  double train_seconds = 0.0;  // training only
  double train_samples_per_second = 0.0;
  // Rank 0's training steps of this invocation (a resumed run: since the resume): the median and
  // 99th percentile of their durations, what stragglers and backup workers change.
  double step_seconds_median = 0.0;
  double step_seconds_p99 = 0.0;
  nlohmann::json time_to_accuracy = nlohmann::json::object();
  std::int64_t seed = 0;
  std::int64_t threads = 1;
  std::int64_t resumed_from_epoch = 0;  // 0 for a run that started from scratch
  // A graceful stop (base/stop_request.h): the signal that asked for it; the run is incomplete
  // and its last checkpoint holds where it stopped. 0 for a run that trained to its end.
  int stopped_by_signal = 0;
  // Data-parallel runs: {"workers", "allreduce", ..., "ranks": [per-rank figures]}; null otherwise.
  nlohmann::json parallel = nullptr;
};

nlohmann::json to_json(const RunSummary& summary);

// Writes summary.json atomically; dtrain::Error naming the path on failure.
void write_summary(const std::string& path, const RunSummary& summary);

}  // namespace dtrain::train
