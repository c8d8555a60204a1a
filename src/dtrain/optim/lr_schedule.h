// Learning-rate schedules: batch-size scaling, warmup, then decay (lecture notes 001 and 002,
// "Learning rate policy"; Goyal et al. 2017, "Accurate, Large Minibatch SGD").
//
// With k = global_batch / base_batch, the peak learning rate is
//   scaling "none":   peak = base_lr
//   scaling "linear": peak = base_lr * k          (linear scaling rule)
//   scaling "sqrt":   peak = base_lr * sqrt(k)    (keeps the update covariance eta^2 / M fixed)
// For the first W = warmup_steps steps (s = 0 .. W-1):
//   warmup "none":     no warmup phase (W must be 0)
//   warmup "constant": lr(s) = warmup_factor * peak
//   warmup "gradual":  lr(s) = base_lr + (peak - base_lr) * s / W   (from the unscaled base_lr at
//                      s = 0, reaching peak at s = W, where the decay phase starts)
// From s = W on, with t = s - W counted from the end of warmup:
//   decay "constant": lr = peak
//   decay "step":     lr = peak * gamma^floor(t / step_size)
//   decay "cosine":   lr = min_lr + (peak - min_lr) * (1 + cos(pi * min(t, T) / T)) / 2,
//                     T = total_steps: the cosine phase lasts total_steps steps AFTER warmup and
//                     then stays at min_lr. In a run of warmup_steps + total_steps steps the last
//                     step has t = T - 1, one step above min_lr; min_lr is first used at t = T.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::optim {

// The schedule section of a run's config; keys are named `schedule.<field>` in errors.
struct ScheduleConfig {
  double base_lr = 0.1;
  std::int64_t base_batch = 128;    // the batch base_lr was tuned for
  std::int64_t global_batch = 128;  // the batch actually used (all workers, all accumulation steps)
  std::string scaling = "none";     // "none" | "linear" | "sqrt"
  std::string decay = "constant";   // "constant" | "step" | "cosine"
  std::int64_t step_size = 0;       // step decay: multiply by gamma every step_size steps
  double gamma = 0.1;               // step decay factor, in (0, 1]
  std::int64_t total_steps = 0;     // cosine: length of the annealing phase after warmup
  double min_lr = 0.0;              // cosine: the floor, in [0, peak]
  std::string warmup = "none";      // "none" | "constant" | "gradual"
  std::int64_t warmup_steps = 0;
  double warmup_factor = 0.1;  // constant warmup's lr = warmup_factor * peak, in (0, 1]
};

class LrSchedule {
 public:
  // Validates every field, throwing ConfigError naming schedule.<key> with the value and the
  // accepted values or range. Keys that only one mode reads (step_size, total_steps, ...) are
  // checked only in that mode; warmup_steps > 0 with warmup "none" is an error, not ignored.
  explicit LrSchedule(ScheduleConfig config);

  // The learning rate of step `step` (0-based, >= 0).
  double lr(std::int64_t step) const;
  // base_lr after batch-size scaling.
  double peak_lr() const { return peak_lr_; }
  const ScheduleConfig& config() const { return config_; }

 private:
  ScheduleConfig config_;
  double peak_lr_ = 0.0;
};

}  // namespace dtrain::optim
