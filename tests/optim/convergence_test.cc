// Convergence sanity: each optimizer, driven by a cosine schedule, minimises the ill-conditioned
// quadratic L(p) = 1/2 sum_i a_i (p_i - c_i)^2 (gradient a_i (p_i - c_i), minimum 0 at p = c,
// curvatures a_i from 0.2 to 5, condition number 25) to a small fraction of the starting loss.
#include <gtest/gtest.h>

#include <cmath>
#include <ostream>
#include <string>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/optim/lr_schedule.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {
namespace {

struct Quadratic {
  std::vector<float> a;
  std::vector<float> c;

  double loss(const std::vector<float>& p) const {
    double sum = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double d = static_cast<double>(p[i]) - c[i];
      sum += 0.5 * a[i] * d * d;
    }
    return sum;
  }
  void gradient(const std::vector<float>& p, std::vector<float>& g) const {
    for (std::size_t i = 0; i < p.size(); ++i) g[i] = a[i] * (p[i] - c[i]);
  }
};

struct ConvergenceCase {
  std::string label;
  OptimizerConfig config;
  double base_lr;
  double max_final_fraction;  // final loss / initial loss must stay below this
};

// Names the case in failure messages instead of dumping its bytes.
void PrintTo(const ConvergenceCase& c, std::ostream* os) { *os << c.label; }

class Convergence : public ::testing::TestWithParam<ConvergenceCase> {};

TEST_P(Convergence, MinimisesAQuadratic) {
  constexpr std::size_t kSize = 40;
  constexpr std::int64_t kSteps = 400;
  Quadratic q;
  Rng rng(5, 3);
  for (std::size_t i = 0; i < kSize; ++i) {
    q.a.push_back(0.2f * std::pow(25.0f, static_cast<float>(i) / (kSize - 1)));
    q.c.push_back(2.0f + rng.normal());
  }
  std::vector<float> p(kSize);
  for (float& value : p) value = rng.normal();
  std::vector<float> g(kSize);

  // Two segments, the second without weight decay (weight decay is 0 here, so the minimum stays c).
  std::unique_ptr<Optimizer> optimizer =
      make_optimizer(GetParam().config, {{"w", 0, 30, true}, {"b", 30, 10, false}});
  ScheduleConfig schedule_config;
  schedule_config.base_lr = GetParam().base_lr;
  schedule_config.decay = "cosine";
  schedule_config.total_steps = kSteps;
  const LrSchedule schedule(schedule_config);

  const double initial = q.loss(p);
  double halfway = 0.0;
  for (std::int64_t step = 0; step < kSteps; ++step) {
    q.gradient(p, g);
    optimizer->step(p.data(), g.data(), schedule.lr(step));
    if (step == kSteps / 2) halfway = q.loss(p);
  }
  const double final_loss = q.loss(p);
  EXPECT_LT(halfway, initial) << GetParam().label;
  EXPECT_LE(final_loss, halfway) << GetParam().label;
  EXPECT_LT(final_loss, GetParam().max_final_fraction * initial)
      << GetParam().label << ": initial " << initial << ", final " << final_loss;
}

std::vector<ConvergenceCase> convergence_cases() {
  std::vector<ConvergenceCase> cases;
  OptimizerConfig sgd;
  cases.push_back({"sgd", sgd, 0.3, 1e-9});
  sgd.momentum = 0.9;
  cases.push_back({"sgd_momentum", sgd, 0.1, 1e-9});
  sgd.nesterov = true;
  cases.push_back({"sgd_nesterov", sgd, 0.1, 1e-9});
  OptimizerConfig adam;
  adam.name = "adam";
  cases.push_back({"adam", adam, 0.1, 1e-9});
  adam.name = "adamw";
  cases.push_back({"adamw", adam, 0.1, 1e-9});
  // LARS's unadapted segment "b" is plain momentum SGD at the global lr, so lr * max(a) = 1.5 must
  // stay below 2 (1 + momentum) = 3.8; the adapted "w" takes steps of about lr * eta * ||p||.
  OptimizerConfig lars;
  lars.name = "lars";
  lars.momentum = 0.9;
  lars.trust_coefficient = 0.1;
  cases.push_back({"lars", lars, 0.3, 1e-7});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllOptimizers, Convergence, ::testing::ValuesIn(convergence_cases()),
                         [](const ::testing::TestParamInfo<ConvergenceCase>& param_info) {
                           return param_info.param.label;
                         });

}  // namespace
}  // namespace dtrain::optim
