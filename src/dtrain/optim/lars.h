// LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg 2017, "Large Batch Training of
// Convolutional Networks"), SGD with momentum whose step is rescaled per tensor so that the update
// of each layer is a fixed fraction (the trust coefficient eta) of that layer's weight norm,
// whatever the gradient's magnitude; this is what keeps very large batches (and their large
// learning rates) stable.
//
// Per segment s (a whole tensor), with wd = weight_decay:
//   local_lr = eta * ||p_s|| / (||g_s|| + wd * ||p_s|| + lars_eps)    (1 when ||p_s|| or ||g_s|| is
//   0) v_s = momentum * v_s + local_lr * (g_s + wd * p_s)                  (v starts at 0) p_s -=
//   lr * v_s
// Segments with weight_decay = false (biases, batch-norm scales and shifts) are excluded from the
// adaptation, as is common practice (e.g. the MLPerf reference and LAMB's exclusion list): for them
// local_lr = 1 and wd = 0, which is plain momentum SGD. Norms are summed in double.
// Cost per step: two passes per segment, the norms (4 flops, 2 floats per element) then the update
// (about 6 flops, 4 floats per element).
#pragma once

#include <vector>

#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

class Lars final : public Optimizer {
 public:
  // Validates config; config.name is not consulted.
  Lars(const OptimizerConfig& config, std::vector<Segment> segments);

  void step(float* params, const float* grads, double lr) override;
  // {"lars.momentum"} when momentum > 0, else nothing.
  std::vector<StateTensor> state() const override;
  void load_state(const std::vector<StateTensor>& state, std::int64_t steps) override;

  // The local_lr of each segment at the last step (1 before the first), for logging and tests.
  const std::vector<double>& last_local_lrs() const { return last_local_lrs_; }

 private:
  float momentum_;
  double weight_decay_;
  double trust_coefficient_;
  double eps_;
  PlacedFloats velocity_;  // state_numel() floats when momentum > 0, else empty
  std::vector<double> last_local_lrs_;
};

}  // namespace dtrain::optim
