#include "dtrain/train/metrics.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/train/atomic_file.h"

namespace dtrain::train {

nlohmann::json to_json(const StepRecord& r) {
  return {{"kind", "step"},      {"epoch", r.epoch}, {"step", r.step},
          {"loss", r.loss},      {"lr", r.lr},       {"samples_per_second", r.samples_per_second},
          {"elapsed", r.elapsed}};
}

nlohmann::json to_json(const EvalRecord& r) {
  return {{"kind", "eval"},
          {"epoch", r.epoch},
          {"step", r.step},
          {"test_loss", r.test_loss},
          {"test_accuracy", r.test_accuracy},
          {"train_seconds", r.train_seconds},
          {"elapsed", r.elapsed}};
}

nlohmann::json to_json(const EpochRecord& r) {
  return {{"kind", "epoch"},
          {"epoch", r.epoch},
          {"step", r.step},
          {"train_loss", r.train_loss},
          {"train_accuracy", r.train_accuracy},
          {"test_loss", r.test_loss},
          {"test_accuracy", r.test_accuracy},
          {"samples_per_second", r.samples_per_second},
          {"epoch_seconds", r.epoch_seconds},
          {"train_seconds", r.train_seconds},
          {"elapsed", r.elapsed}};
}

MetricsLog::MetricsLog(const std::string& path, bool append) : path_(path) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd_ < 0) {
    throw Error(
        fmt::format("cannot open {} for writing: {}; check that the run folder is "
                    "writable",
                    path, std::strerror(errno)));
  }
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

void MetricsLog::write(const nlohmann::json& record) {
  const std::string line = record.dump() + "\n";
  const off_t before = ::lseek(fd_, 0, SEEK_END);
  std::size_t written = 0;
  while (written < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + written, line.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      written += static_cast<std::size_t>(n);
      continue;
    }
    const std::string reason = n == 0 ? "no progress" : std::strerror(errno);
    // Take a partial line back out, so that the file stays whole JSON lines.
    if (written > 0 && before >= 0) {
      // Best effort: should this fail too, readers of metrics.jsonl skip a torn line.
      [[maybe_unused]] const int truncated = ::ftruncate(fd_, before);
    }
    if (lost_++ == 0) {
      log::warn(
          "cannot write {}: {}; metrics.jsonl is a diagnostic, so the run goes on and records "
          "that cannot be written are left out (warned once)",
          path_, reason);
    }
    return;
  }
}

AccuracyTargets::AccuracyTargets(std::vector<double> targets)
    : targets_(std::move(targets)), reached_(targets_.size()) {}

void AccuracyTargets::observe(double accuracy, double train_seconds) {
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    if (!reached_[i] && accuracy >= targets_[i]) reached_[i] = train_seconds;
  }
}

std::string AccuracyTargets::key(double target) { return fmt::format("{}", target); }

nlohmann::json AccuracyTargets::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (std::size_t i = 0; i < targets_.size(); ++i) {
    out[key(targets_[i])] = reached_[i] ? nlohmann::json(*reached_[i]) : nlohmann::json(nullptr);
  }
  return out;
}

nlohmann::json to_json(const RunSummary& s) {
  nlohmann::json out = {{"model", s.model},
                        {"dataset", s.dataset},
                        {"parameters", s.parameters},
                        {"epochs", s.epochs},
                        {"steps", s.steps},
                        {"samples", s.samples},
                        {"final_train_loss", s.final_train_loss},
                        {"final_test_loss", s.final_test_loss},
                        {"final_test_accuracy", s.final_test_accuracy},
                        {"best_test_accuracy", s.best_test_accuracy},
                        {"wall_seconds", s.wall_seconds},
                        {"train_seconds", s.train_seconds},
                        {"train_samples_per_second", s.train_samples_per_second},
                        {"step_seconds_median", s.step_seconds_median},
                        {"step_seconds_p99", s.step_seconds_p99},
                        {"time_to_accuracy", s.time_to_accuracy},
                        {"seed", s.seed},
                        {"threads", s.threads},
                        {"resumed_from_epoch", s.resumed_from_epoch}};
  if (!s.parallel.is_null()) out["parallel"] = s.parallel;
  return out;
}

void write_summary(const std::string& path, const RunSummary& summary) {
  write_file_atomically(path, to_json(summary).dump(2) + "\n");
}

}  // namespace dtrain::train
