// LrSchedule: every combination of scaling x warmup x decay at chosen steps against values worked
// out by hand, and each bad key as a ConfigError naming it.
#include "dtrain/optim/lr_schedule.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::optim {
namespace {

using ::testing::HasSubstr;

constexpr double kTol = 1e-9;

// The shared setting: base_lr 0.1 tuned for batch 128, run at batch 512, so k = 4 and the peak is
// 0.1 (none), 0.4 (linear: 0.1 * 4) or 0.2 (sqrt: 0.1 * sqrt(4)). Warmup lasts W = 4 steps with
// warmup_factor 0.25; step decay halves every 10 steps; cosine anneals over 8 steps to 0.02.
ScheduleConfig make_config(const std::string& scaling, const std::string& warmup,
                           const std::string& decay) {
  ScheduleConfig c;
  c.base_lr = 0.1;
  c.base_batch = 128;
  c.global_batch = 512;
  c.scaling = scaling;
  c.warmup = warmup;
  c.warmup_steps = warmup == "none" ? 0 : 4;
  c.warmup_factor = 0.25;
  c.decay = decay;
  c.step_size = 10;
  c.gamma = 0.5;
  c.total_steps = 8;
  c.min_lr = 0.02;
  return c;
}

const std::vector<std::string> kScalings = {"none", "linear", "sqrt"};
const double kPeaks[] = {0.1, 0.4, 0.2};

// Warmup phase at s = 0, 1, 3 (W = 4), per scaling (rows) :
//   constant: 0.25 * peak at every s
//   gradual:  0.1 + (peak - 0.1) * s / 4
//     none:   0.1, 0.1, 0.1
//     linear: 0.1, 0.1 + 0.3 / 4 = 0.175, 0.1 + 0.9 / 4 = 0.325
//     sqrt:   0.1, 0.1 + 0.1 / 4 = 0.125, 0.1 + 0.3 / 4 = 0.175
const std::int64_t kWarmupProbes[] = {0, 1, 3};
const double kConstantWarmup[3][3] = {{0.025, 0.025, 0.025}, {0.1, 0.1, 0.1}, {0.05, 0.05, 0.05}};
const double kGradualWarmup[3][3] = {{0.1, 0.1, 0.1}, {0.1, 0.175, 0.325}, {0.1, 0.125, 0.175}};

// Decay phase at t = s - W = 0, 3, 4, 10, 20, per scaling (rows):
//   constant: peak
//   step:     peak, peak, peak, peak / 2, peak / 4
//   cosine:   0.02 + (peak - 0.02) * (1 + cos(pi * min(t, 8) / 8)) / 2, with
//             (1 + cos(3 pi / 8)) / 2 = (1 + 0.38268343) / 2 = 0.69134172, at t = 4 it is 1/2,
//             at t >= 8 it is 0:
//     none:   0.1, 0.02 + 0.08 * 0.69134172 = 0.07530734, 0.06, 0.02, 0.02
//     linear: 0.4, 0.02 + 0.38 * 0.69134172 = 0.28270985, 0.21, 0.02, 0.02
//     sqrt:   0.2, 0.02 + 0.18 * 0.69134172 = 0.14444151, 0.11, 0.02, 0.02
const std::int64_t kDecayProbes[] = {0, 3, 4, 10, 20};
const double kConstantDecay[3][5] = {
    {0.1, 0.1, 0.1, 0.1, 0.1}, {0.4, 0.4, 0.4, 0.4, 0.4}, {0.2, 0.2, 0.2, 0.2, 0.2}};
const double kStepDecay[3][5] = {
    {0.1, 0.1, 0.1, 0.05, 0.025}, {0.4, 0.4, 0.4, 0.2, 0.1}, {0.2, 0.2, 0.2, 0.1, 0.05}};
const double kCosineDecay[3][5] = {{0.1, 0.07530734, 0.06, 0.02, 0.02},
                                   {0.4, 0.28270985, 0.21, 0.02, 0.02},
                                   {0.2, 0.14444151, 0.11, 0.02, 0.02}};

TEST(LrSchedule, EveryScalingWarmupAndDecayCombination) {
  for (std::size_t scaling = 0; scaling < 3; ++scaling) {
    for (const std::string warmup : {"none", "constant", "gradual"}) {
      for (const std::string decay : {"constant", "step", "cosine"}) {
        SCOPED_TRACE(kScalings[scaling] + " / " + warmup + " / " + decay);
        const LrSchedule schedule(make_config(kScalings[scaling], warmup, decay));
        EXPECT_NEAR(schedule.peak_lr(), kPeaks[scaling], kTol);
        const std::int64_t warmup_steps = warmup == "none" ? 0 : 4;
        if (warmup != "none") {
          const double(&expected)[3] =
              warmup == "constant" ? kConstantWarmup[scaling] : kGradualWarmup[scaling];
          for (int i = 0; i < 3; ++i) {
            EXPECT_NEAR(schedule.lr(kWarmupProbes[i]), expected[i], kTol)
                << "warmup step " << kWarmupProbes[i];
          }
        }
        const double(&expected)[5] = decay == "constant" ? kConstantDecay[scaling]
                                     : decay == "step"   ? kStepDecay[scaling]
                                                         : kCosineDecay[scaling];
        for (int i = 0; i < 5; ++i) {
          // The decay runs on the step counted from the end of warmup.
          EXPECT_NEAR(schedule.lr(warmup_steps + kDecayProbes[i]), expected[i], 1e-8)
              << "decay step t = " << kDecayProbes[i];
        }
      }
    }
  }
}

TEST(LrSchedule, GradualWarmupReachesThePeakExactlyWhereDecayStarts) {
  ScheduleConfig c = make_config("linear", "gradual", "step");
  c.warmup_steps = 5;
  const LrSchedule schedule(c);
  // Each warmup step adds (0.4 - 0.1) / 5 = 0.06: 0.1, 0.16, 0.22, 0.28, 0.34, then 0.4.
  const double expected[] = {0.1, 0.16, 0.22, 0.28, 0.34, 0.4, 0.4};
  for (int s = 0; s < 7; ++s) EXPECT_NEAR(schedule.lr(s), expected[s], kTol) << "step " << s;
}

TEST(LrSchedule, NonIntegralBatchRatio) {
  ScheduleConfig c;
  c.base_lr = 0.1;
  c.base_batch = 256;
  c.global_batch = 96;  // k = 0.375
  c.scaling = "linear";
  EXPECT_NEAR(LrSchedule(c).peak_lr(), 0.0375, kTol);
  c.scaling = "sqrt";  // sqrt(0.375) = 0.61237244
  EXPECT_NEAR(LrSchedule(c).peak_lr(), 0.061237244, 1e-9);
  EXPECT_NEAR(LrSchedule(c).lr(1000), 0.061237244, 1e-9);
}

struct BadSchedule {
  std::function<void(ScheduleConfig&)> edit;
  std::vector<std::string> message_parts;
};

TEST(LrSchedule, BadKeysNameTheKeyAndTheAcceptedValues) {
  const std::vector<BadSchedule> cases = {
      {[](ScheduleConfig& c) { c.base_lr = 0.0; }, {"schedule.base_lr = 0", "> 0"}},
      {[](ScheduleConfig& c) { c.base_batch = 0; }, {"schedule.base_batch = 0", ">= 1"}},
      {[](ScheduleConfig& c) { c.global_batch = -8; }, {"schedule.global_batch = -8", ">= 1"}},
      {[](ScheduleConfig& c) { c.scaling = "quadratic"; },
       {"schedule.scaling = 'quadratic'", "'none', 'linear', 'sqrt'"}},
      {[](ScheduleConfig& c) { c.decay = "exponential"; },
       {"schedule.decay = 'exponential'", "'constant', 'step', 'cosine'"}},
      {[](ScheduleConfig& c) { c.warmup = "slow"; },
       {"schedule.warmup = 'slow'", "'none', 'constant', 'gradual'"}},
      {[](ScheduleConfig& c) { c.decay = "step"; }, {"schedule.step_size = 0", ">= 1"}},
      {[](ScheduleConfig& c) {
         c.decay = "step";
         c.step_size = 5;
         c.gamma = 1.5;
       },
       {"schedule.gamma = 1.5", "(0, 1]"}},
      {[](ScheduleConfig& c) { c.decay = "cosine"; }, {"schedule.total_steps = 0", ">= 1"}},
      {[](ScheduleConfig& c) {
         c.decay = "cosine";
         c.total_steps = 10;
         c.min_lr = 0.5;
       },
       {"schedule.min_lr = 0.5", "[0, 0.1]"}},
      {[](ScheduleConfig& c) { c.warmup = "gradual"; }, {"schedule.warmup_steps = 0", ">= 1"}},
      {[](ScheduleConfig& c) { c.warmup_steps = 3; },
       {"schedule.warmup_steps = 3", "schedule.warmup = 'none'"}},
      {[](ScheduleConfig& c) {
         c.warmup = "constant";
         c.warmup_steps = 3;
         c.warmup_factor = 0.0;
       },
       {"schedule.warmup_factor = 0", "(0, 1]"}},
  };
  for (const BadSchedule& bad : cases) {
    ScheduleConfig config;
    bad.edit(config);
    SCOPED_TRACE(bad.message_parts.front());
    try {
      LrSchedule schedule(config);
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& error) {
      for (const std::string& part : bad.message_parts) EXPECT_THAT(error.what(), HasSubstr(part));
    }
  }
}

TEST(LrSchedule, DefaultsAreAConstantUnscaledRate) {
  const LrSchedule schedule{ScheduleConfig{}};
  EXPECT_EQ(schedule.peak_lr(), 0.1);
  EXPECT_EQ(schedule.lr(0), 0.1);
  EXPECT_EQ(schedule.lr(123456), 0.1);
}

}  // namespace
}  // namespace dtrain::optim
