#include "dtrain/optim/lr_schedule.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::optim {

namespace {

[[noreturn]] void out_of_range(const char* key, const std::string& value, const char* range,
                               const std::string& context = "") {
  throw ConfigError(
      fmt::format("schedule.{} = {} is out of range: must be {}{}", key, value, range, context));
}

}  // namespace

LrSchedule::LrSchedule(ScheduleConfig config) : config_(std::move(config)) {
  const ScheduleConfig& c = config_;
  if (!(c.base_lr > 0.0 && std::isfinite(c.base_lr))) {
    out_of_range("base_lr", fmt::format("{}", c.base_lr), "> 0");
  }
  if (c.base_batch <= 0) out_of_range("base_batch", fmt::format("{}", c.base_batch), ">= 1");
  if (c.global_batch <= 0) {
    out_of_range("global_batch", fmt::format("{}", c.global_batch), ">= 1");
  }

  const double k = static_cast<double>(c.global_batch) / static_cast<double>(c.base_batch);
  if (c.scaling == "none") {
    peak_lr_ = c.base_lr;
  } else if (c.scaling == "linear") {
    peak_lr_ = c.base_lr * k;
  } else if (c.scaling == "sqrt") {
    peak_lr_ = c.base_lr * std::sqrt(k);
  } else {
    throw ConfigError(fmt::format(
        "schedule.scaling = '{}' is not a scaling rule; accepted: 'none', 'linear', 'sqrt'",
        c.scaling));
  }

  if (c.decay == "step") {
    if (c.step_size <= 0) {
      out_of_range("step_size", fmt::format("{}", c.step_size), ">= 1",
                   " with schedule.decay = 'step'");
    }
    if (!(c.gamma > 0.0 && c.gamma <= 1.0)) {
      out_of_range("gamma", fmt::format("{}", c.gamma), "in (0, 1]");
    }
  } else if (c.decay == "cosine") {
    if (c.total_steps <= 0) {
      out_of_range("total_steps", fmt::format("{}", c.total_steps), ">= 1",
                   " with schedule.decay = 'cosine' (the length of the annealing after warmup)");
    }
    if (!(c.min_lr >= 0.0 && c.min_lr <= peak_lr_)) {
      out_of_range("min_lr", fmt::format("{}", c.min_lr),
                   fmt::format("in [0, {}] (the peak learning rate)", peak_lr_).c_str());
    }
  } else if (c.decay != "constant") {
    throw ConfigError(fmt::format(
        "schedule.decay = '{}' is not a decay; accepted: 'constant', 'step', 'cosine'", c.decay));
  }

  if (c.warmup == "none") {
    if (c.warmup_steps != 0) {
      throw ConfigError(
          fmt::format("schedule.warmup_steps = {} has no effect with schedule.warmup = 'none'; set "
                      "schedule.warmup to 'constant' or 'gradual', or warmup_steps to 0",
                      c.warmup_steps));
    }
  } else if (c.warmup == "constant" || c.warmup == "gradual") {
    if (c.warmup_steps <= 0) {
      out_of_range("warmup_steps", fmt::format("{}", c.warmup_steps), ">= 1",
                   fmt::format(" with schedule.warmup = '{}'", c.warmup));
    }
    if (c.warmup == "constant" && !(c.warmup_factor > 0.0 && c.warmup_factor <= 1.0)) {
      out_of_range("warmup_factor", fmt::format("{}", c.warmup_factor), "in (0, 1]");
    }
  } else {
    throw ConfigError(fmt::format(
        "schedule.warmup = '{}' is not a warmup; accepted: 'none', 'constant', 'gradual'",
        c.warmup));
  }
}

double LrSchedule::lr(std::int64_t step) const {
  DTRAIN_CHECK_GE(step, std::int64_t{0});
  const ScheduleConfig& c = config_;
  if (step < c.warmup_steps) {
    if (c.warmup == "constant") return c.warmup_factor * peak_lr_;
    const double fraction = static_cast<double>(step) / static_cast<double>(c.warmup_steps);
    return c.base_lr + (peak_lr_ - c.base_lr) * fraction;
  }
  const std::int64_t t = step - c.warmup_steps;
  if (c.decay == "step") {
    return peak_lr_ * std::pow(c.gamma, static_cast<double>(t / c.step_size));
  }
  if (c.decay == "cosine") {
    const double progress =
        static_cast<double>(std::min(t, c.total_steps)) / static_cast<double>(c.total_steps);
    return c.min_lr + (peak_lr_ - c.min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  }
  return peak_lr_;
}

}  // namespace dtrain::optim
