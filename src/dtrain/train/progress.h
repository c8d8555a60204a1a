// What a person watching the run sees on stderr.
//
// On a terminal (isatty(stderr)) a one-line bar is redrawn in place at most 10 times a second:
//   epoch 2/5 [########------------] 187/469  loss 0.4123  61234 samples/s  ETA 3.1 s
// Elsewhere (a log file, CI) the bar would be noise, so a plain line is printed every
// train.log_every steps instead. Both print the same line at each epoch end:
//   epoch 3/5  loss 0.3121  train 88.4%  test 87.1%  61234 samples/s  4.9 s
// quiet prints nothing.
//
// Silence is not left unexplained: off a terminal, while no step line of an epoch has been printed
// yet (a huge model's first steps can take minutes), a heartbeat line comes every 10 s:
//   epoch 1/5: 3 of 469 steps done, 20 s into the epoch (a step line every train.log_every steps)
// and a model of more than 50M parameters is announced before it is built (announce_model_build).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "dtrain/base/timer.h"
#include "dtrain/train/memory_budget.h"
#include "dtrain/train/metrics.h"

namespace dtrain::train {

// The epoch-end line above (no newline).
std::string format_epoch_line(const EpochRecord& record, std::int64_t epochs);

// Models above this many parameters are announced before they are built.
inline constexpr std::int64_t kAnnounceParameters = 50'000'000;

// "building the model: 924000000 parameters, 10.33 GiB (...) for parameters, gradients and
// optimizer state ..." on `out`, when `need` has more than kAnnounceParameters parameters.
void announce_model_build(std::FILE* out, const std::optional<MemoryNeed>& need);

class Progress {
 public:
  enum class Style { kBar, kLines, kQuiet };

  // kBar when `out` is a terminal, kLines otherwise, kQuiet when quiet.
  static Style detect_style(std::FILE* out, bool quiet);

  Progress(std::FILE* out, Style style, std::int64_t epochs);
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  // Seconds between heartbeat lines (kLines only); tests shorten it. 0 turns them off.
  void set_heartbeat_seconds(double seconds) { heartbeat_seconds_ = seconds; }

  // Starts the epoch's heartbeat (kLines), stopped by its first step line or its end.
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
  void start_heartbeat();
  void stop_heartbeat();

  std::FILE* out_;
  Style style_;
  std::int64_t epochs_;
  std::int64_t epoch_ = 0;
  std::int64_t steps_in_epoch_ = 0;
  bool bar_shown_ = false;
  Stopwatch epoch_clock_;
  double last_draw_ = -1.0;
  // The heartbeat: a thread per epoch until the first step line; print_mutex_ keeps its lines and
  // the others whole.
  double heartbeat_seconds_ = 10.0;
  std::mutex print_mutex_;
  std::mutex heartbeat_mutex_;
  std::condition_variable heartbeat_wake_;
  bool heartbeat_stop_ = false;
  std::thread heartbeat_;
  std::atomic<std::int64_t> steps_done_{0};
};

}  // namespace dtrain::train
