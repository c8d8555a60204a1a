// What a person watching the run sees on stderr.
//
// On a terminal (isatty(stderr)) a one-line bar is redrawn in place at most 10 times a second:
//   epoch 2/5 [########------------] 187/469  loss 0.4123  61234 samples/s  ETA 3.1 s
// Elsewhere (a log file, CI) the bar would be noise, so a plain line is printed every
// train.log_every steps instead. Both print the same line at each epoch end:
//   epoch 3/5  loss 0.3121  train 88.4%  test 87.1%  61234 samples/s  4.9 s
// quiet prints nothing.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "dtrain/base/timer.h"
#include "dtrain/train/metrics.h"

namespace dtrain::train {

// The epoch-end line above (no newline).
std::string format_epoch_line(const EpochRecord& record, std::int64_t epochs);

class Progress {
 public:
  enum class Style { kBar, kLines, kQuiet };

  // kBar when `out` is a terminal, kLines otherwise, kQuiet when quiet.
  static Style detect_style(std::FILE* out, bool quiet);

  Progress(std::FILE* out, Style style, std::int64_t epochs);

  void begin_epoch(std::int64_t epoch, std::int64_t steps_in_epoch);
  // After step `step_in_epoch` (1-based) of the current epoch; loss is that step's loss.
  void step(std::int64_t step_in_epoch, double loss, double samples_per_second);
  // A step record (kLines prints it).
  void log_step(const StepRecord& record);
  void end_epoch(const EpochRecord& record);
  // Any other message, on its own line (the bar is cleared first).
  void message(const std::string& text);

 private:
  void clear_bar();

  std::FILE* out_;
  Style style_;
  std::int64_t epochs_;
  std::int64_t epoch_ = 0;
  std::int64_t steps_in_epoch_ = 0;
  bool bar_shown_ = false;
  Stopwatch epoch_clock_;
  double last_draw_ = -1.0;
};

}  // namespace dtrain::train
