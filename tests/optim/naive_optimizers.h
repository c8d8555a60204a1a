// Naive twins of the optimizers (tests only): one element at a time, in double, straight from the
// formulas in sgd.h, adam.h and lars.h, walking the segments one by one (no merged ranges, no
// intrinsics). State is kept per segment, so they also check the packed state layout of the real
// optimizers through state().
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "dtrain/optim/optimizer.h"

namespace dtrain::testing {

class NaiveOptimizer {
 public:
  NaiveOptimizer(optim::OptimizerConfig config, std::vector<optim::Segment> segments)
      : config_(std::move(config)), segments_(std::move(segments)) {
    for (const optim::Segment& segment : segments_) {
      const auto n = static_cast<std::size_t>(segment.numel);
      momentum_.emplace_back(n, 0.0);
      exp_avg_.emplace_back(n, 0.0);
      exp_avg_sq_.emplace_back(n, 0.0);
    }
  }

  // params and grads are whole flat buffers, as for optim::Optimizer::step.
  void step(std::vector<double>& params, const std::vector<double>& grads, double lr) {
    ++steps_;
    for (std::size_t s = 0; s < segments_.size(); ++s) {
      const optim::Segment& segment = segments_[s];
      const double wd = segment.weight_decay ? config_.weight_decay : 0.0;
      double local_lr = 1.0;
      if (config_.name == "lars" && segment.weight_decay) {
        double p2 = 0.0;
        double g2 = 0.0;
        for (std::int64_t i = 0; i < segment.numel; ++i) {
          const auto at = static_cast<std::size_t>(segment.offset + i);
          p2 += params[at] * params[at];
          g2 += grads[at] * grads[at];
        }
        const double p_norm = std::sqrt(p2);
        const double g_norm = std::sqrt(g2);
        if (p_norm > 0.0 && g_norm > 0.0) {
          local_lr = config_.trust_coefficient * p_norm / (g_norm + wd * p_norm + config_.lars_eps);
        }
      }
      for (std::int64_t i = 0; i < segment.numel; ++i) {
        const auto at = static_cast<std::size_t>(segment.offset + i);
        const auto k = static_cast<std::size_t>(i);
        double& p = params[at];
        const double grad = grads[at];
        if (config_.name == "sgd") {
          const double g = grad + wd * p;
          if (config_.momentum == 0.0) {
            p -= lr * g;
          } else {
            double& v = momentum_[s][k];
            v = config_.momentum * v + g;
            p -= lr * (config_.nesterov ? g + config_.momentum * v : v);
          }
        } else if (config_.name == "adam" || config_.name == "adamw") {
          double g = grad;
          if (config_.name == "adamw") {
            p -= lr * wd * p;
          } else {
            g += wd * p;
          }
          double& m = exp_avg_[s][k];
          double& v = exp_avg_sq_[s][k];
          m = config_.beta1 * m + (1.0 - config_.beta1) * g;
          v = config_.beta2 * v + (1.0 - config_.beta2) * g * g;
          const double m_hat = m / (1.0 - std::pow(config_.beta1, steps_));
          const double v_hat = v / (1.0 - std::pow(config_.beta2, steps_));
          p -= lr * m_hat / (std::sqrt(v_hat) + config_.eps);
        } else {  // lars
          const double update = local_lr * (grad + wd * p);
          if (config_.momentum == 0.0) {
            p -= lr * update;
          } else {
            double& v = momentum_[s][k];
            v = config_.momentum * v + update;
            p -= lr * v;
          }
        }
      }
    }
  }

  // The state of segment s, packed like optim::StateTensor: "momentum", "exp_avg", "exp_avg_sq".
  const std::vector<std::vector<double>>& momentum() const { return momentum_; }
  const std::vector<std::vector<double>>& exp_avg() const { return exp_avg_; }
  const std::vector<std::vector<double>>& exp_avg_sq() const { return exp_avg_sq_; }

 private:
  optim::OptimizerConfig config_;
  std::vector<optim::Segment> segments_;
  int steps_ = 0;
  std::vector<std::vector<double>> momentum_;
  std::vector<std::vector<double>> exp_avg_;
  std::vector<std::vector<double>> exp_avg_sq_;
};

}  // namespace dtrain::testing
