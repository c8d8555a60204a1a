// 1-bit Adam (Tang et al. 2021, "1-bit Adam: Communication Efficient Large-Scale Training with
// Adam's Convergence Speed"; DeepSpeed's OnebitAdam): Adam whose second moment v stops changing
// after a warm-up, so that the only state the ranks must agree on afterwards is the momentum m,
// which then travels compressed to one bit per element (parallel/onebit_allreduce.h).
//
// Two phases, t = steps() + 1, W = freeze_step (>= 1):
//   t <= W (warm-up)  exactly Adam (adam.h, with bias correction), on the gradient the caller has
//                     already averaged (data parallelism allreduces it uncompressed): the same bits
//                     as optim.name = "adam", because this class runs Adam's own code.
//   t >  W (frozen)   per element, with wd = weight_decay where the segment's flag is set:
//                       g = grad_scale x grad + wd x p          (L2, as Adam)
//                       m = beta1 m + (1 - beta1) g             (this rank's momentum)
//                       m = exchange(m)                         (ranks: the compressed average)
//                       p -= (lr / (1 - beta1^t)) m / (sqrt(v) / sqrt(1 - beta2^W) + eps)
//                     v and its bias correction stay as they were at t = W (the paper's frozen
//                     variance; DeepSpeed drops bias correction altogether, we keep Adam's so that
//                     the step size does not jump at the freeze). The denominator is therefore a
//                     constant, computed once at the freeze: the frozen step costs 2 passes of
//                     about 3 flops and 4 floats of traffic per element (p, g, m, denominator),
//                     no sqrt.
// Elements whose v is 0 at the freeze (no gradient reached them in the warm-up: a pixel that is
// always 0) are masked from then on, as DeepSpeed's exp_avg_mask does: their momentum is reset to 0
// after each exchange and they do not move (the sign codec would otherwise send them +-scale,
// a step of lr x scale / eps).
// step() without an exchange (one worker) is the frozen rule with grad_scale 1: Adam with a frozen
// variance.
//
// Checkpoints: "onebit_adam.exp_avg" and "onebit_adam.exp_avg_sq" (m and v, the state layout of
// optimizer.h) and the step count, which says the phase; the denominator is recomputed from v.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "dtrain/optim/adam.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

class OneBitAdam final : public Optimizer {
 public:
  // Validates config (optim.freeze_step >= 1); config.name is not consulted.
  OneBitAdam(const OptimizerConfig& config, std::vector<Segment> segments);

  // Makes this rank's momentum (state_numel() floats, the state layout) the ranks' agreed one, in
  // place.
  using MomentumExchange = std::function<void(std::span<float> momentum)>;

  // A warm-up step is Adam's; a frozen one exchanges nothing (one worker).
  void step(float* params, const float* grads, double lr) override;
  // A warm-up step is Adam's on `grads` (grad_scale and exchange unused); a frozen one follows the
  // rule above, calling `exchange` once between the momentum's update and the parameters'.
  void step(float* params, const float* grads, double lr, float grad_scale,
            const MomentumExchange& exchange);

  std::int64_t freeze_step() const { return freeze_step_; }
  // Whether the next step is a frozen one (t > W).
  bool frozen() const { return steps() >= freeze_step_; }

  std::vector<StateTensor> state() const override;
  void load_state(const std::vector<StateTensor>& state, std::int64_t steps) override;

 private:
  // At the first frozen step or a frozen load: Adam's m and v into m_ and v_, the denominator.
  void freeze(std::vector<float> m, std::vector<float> v);

  Adam warmup_;  // the warm-up's Adam, whose state is m and v until the freeze
  std::int64_t freeze_step_;
  float beta1_;
  double beta1_double_;
  float one_minus_beta1_;
  float weight_decay_;
  float inv_sqrt_bc2_;  // 1 / sqrt(1 - beta2^W), frozen
  float eps_;
  bool moved_ = false;        // m_, v_ hold the state (else warmup_ does)
  std::vector<float> m_;      // state_numel()
  std::vector<float> v_;      // state_numel(), kept for checkpoints
  std::vector<float> denom_;  // sqrt(v) x inv_sqrt_bc2_ + eps; +infinity where v = 0 (masked)
};

}  // namespace dtrain::optim
