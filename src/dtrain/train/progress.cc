#include "dtrain/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace dtrain::train {

std::string format_epoch_line(const EpochRecord& r, std::int64_t epochs) {
  return fmt::format(
      "epoch {}/{}  loss {:.4f}  train {:.1f}%  test {:.1f}%  {:.0f} samples/s  {:.1f} s", r.epoch,
      epochs, r.train_loss, 100.0 * r.train_accuracy, 100.0 * r.test_accuracy, r.samples_per_second,
      r.epoch_seconds);
}

void announce_model_build(std::FILE* out, const std::optional<MemoryNeed>& need) {
  if (!need || need->parameters <= kAnnounceParameters) return;
  const MemoryParts parts = memory_parts(*need);
  fmt::print(out,
             "building the model: {} parameters, {} for parameters, gradients, optimizer state "
             "and checkpoint copies ({} available); allocating and initialising take a while\n",
             need->parameters, format_bytes(parts.total), [] {
               const AvailableMemory available = available_memory();
               return available.known ? format_bytes(available.bytes) : std::string("unknown");
             }());
  std::fflush(out);
}

Progress::Style Progress::detect_style(std::FILE* out, bool quiet) {
  if (quiet) return Style::kQuiet;
  return ::isatty(::fileno(out)) ? Style::kBar : Style::kLines;
}

Progress::Progress(std::FILE* out, Style style, std::int64_t epochs)
    : out_(out), style_(style), epochs_(epochs) {}

Progress::~Progress() { stop_heartbeat(); }

void Progress::begin_epoch(std::int64_t epoch, std::int64_t steps_in_epoch) {
  stop_heartbeat();
  epoch_ = epoch;
  steps_in_epoch_ = steps_in_epoch;
  epoch_clock_.reset();
  last_draw_ = -1.0;
  steps_done_ = 0;
  start_heartbeat();
}

// Off a terminal, until the epoch's first step line: every heartbeat_seconds_, how far the epoch
// has come, so that a log never stays silent for minutes (the first steps of a huge model).
void Progress::start_heartbeat() {
  if (style_ != Style::kLines || heartbeat_seconds_ <= 0.0) return;
  heartbeat_stop_ = false;
  heartbeat_ = std::thread([this] {
    const auto period = std::chrono::duration<double>(heartbeat_seconds_);
    std::unique_lock<std::mutex> lock(heartbeat_mutex_);
    while (!heartbeat_wake_.wait_for(lock, period, [this] { return heartbeat_stop_; })) {
      const std::lock_guard<std::mutex> print(print_mutex_);
      fmt::print(out_,
                 "epoch {}/{}: {} of {} steps done, {:.0f} s into the epoch (a step line every "
                 "train.log_every steps)\n",
                 epoch_, epochs_, steps_done_.load(), steps_in_epoch_, epoch_clock_.seconds());
      std::fflush(out_);
    }
  });
}

void Progress::stop_heartbeat() {
  if (!heartbeat_.joinable()) return;
  {
    const std::lock_guard<std::mutex> lock(heartbeat_mutex_);
    heartbeat_stop_ = true;
  }
  heartbeat_wake_.notify_all();
  heartbeat_.join();
}

void Progress::step(std::int64_t step_in_epoch, double loss, double samples_per_second) {
  steps_done_ = step_in_epoch;
  if (style_ != Style::kBar) return;
  const double now = epoch_clock_.seconds();
  if (now - last_draw_ < 0.1 && step_in_epoch < steps_in_epoch_) return;
  last_draw_ = now;
  constexpr int kWidth = 20;
  const double fraction =
      steps_in_epoch_ > 0 ? static_cast<double>(step_in_epoch) / steps_in_epoch_ : 1.0;
  const int filled = std::clamp(static_cast<int>(fraction * kWidth), 0, kWidth);
  const double eta = fraction > 0 ? now * (1.0 - fraction) / fraction : 0.0;
  fmt::print(out_, "\r\033[Kepoch {}/{} [{}{}] {}/{}  loss {:.4f}  {:.0f} samples/s  ETA {:.1f} s",
             epoch_, epochs_, std::string(static_cast<std::size_t>(filled), '#'),
             std::string(static_cast<std::size_t>(kWidth - filled), '-'), step_in_epoch,
             steps_in_epoch_, loss, samples_per_second, eta);
  std::fflush(out_);
  bar_shown_ = true;
}

void Progress::log_step(const StepRecord& r) {
  if (style_ != Style::kLines) return;
  stop_heartbeat();
  const std::lock_guard<std::mutex> print(print_mutex_);
  fmt::print(out_, "epoch {}/{}  step {}  loss {:.4f}  lr {:.4g}  {:.0f} samples/s\n", r.epoch,
             epochs_, r.step, r.loss, r.lr, r.samples_per_second);
  std::fflush(out_);
}

void Progress::end_epoch(const EpochRecord& record) {
  if (style_ == Style::kQuiet) return;
  stop_heartbeat();
  clear_bar();
  fmt::print(out_, "{}\n", format_epoch_line(record, epochs_));
  std::fflush(out_);
}

void Progress::message(const std::string& text) {
  if (style_ == Style::kQuiet) return;
  const std::lock_guard<std::mutex> print(print_mutex_);
  clear_bar();
  fmt::print(out_, "{}\n", text);
  std::fflush(out_);
}

void Progress::clear_bar() {
  if (!bar_shown_) return;
  fmt::print(out_, "\r\033[K");
  bar_shown_ = false;
}

}  // namespace dtrain::train
