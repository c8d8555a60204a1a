#include "dtrain/train/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>

namespace dtrain::train {

std::string format_epoch_line(const EpochRecord& r, std::int64_t epochs) {
  return fmt::format(
      "epoch {}/{}  loss {:.4f}  train {:.1f}%  test {:.1f}%  {:.0f} samples/s  {:.1f} s", r.epoch,
      epochs, r.train_loss, 100.0 * r.train_accuracy, 100.0 * r.test_accuracy, r.samples_per_second,
      r.epoch_seconds);
}

Progress::Style Progress::detect_style(std::FILE* out, bool quiet) {
  if (quiet) return Style::kQuiet;
  return ::isatty(::fileno(out)) ? Style::kBar : Style::kLines;
}

Progress::Progress(std::FILE* out, Style style, std::int64_t epochs)
    : out_(out), style_(style), epochs_(epochs) {}

void Progress::begin_epoch(std::int64_t epoch, std::int64_t steps_in_epoch) {
  epoch_ = epoch;
  steps_in_epoch_ = steps_in_epoch;
  epoch_clock_.reset();
  last_draw_ = -1.0;
}

void Progress::step(std::int64_t step_in_epoch, double loss, double samples_per_second) {
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
  fmt::print(out_, "epoch {}/{}  step {}  loss {:.4f}  lr {:.4g}  {:.0f} samples/s\n", r.epoch,
             epochs_, r.step, r.loss, r.lr, r.samples_per_second);
  std::fflush(out_);
}

void Progress::end_epoch(const EpochRecord& record) {
  if (style_ == Style::kQuiet) return;
  clear_bar();
  fmt::print(out_, "{}\n", format_epoch_line(record, epochs_));
  std::fflush(out_);
}

void Progress::message(const std::string& text) {
  if (style_ == Style::kQuiet) return;
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
