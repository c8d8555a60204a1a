// Adam (Kingma & Ba 2015) with bias correction, and AdamW (Loshchilov & Hutter 2019), with the
// semantics of PyTorch's torch.optim.Adam / torch.optim.AdamW.
//
// Per element at step t = steps() + 1, with wd = weight_decay on segments whose weight_decay flag
// is set and 0 elsewhere:
//   Adam:   g = grad + wd * p                       (L2 regularisation folded into the gradient)
//   AdamW:  p = p * (1 - lr * wd);  g = grad        (decoupled decay, before the Adam update)
//   m = beta1 * m + (1 - beta1) * g
//   v = beta2 * v + (1 - beta2) * g^2
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// m and v start at 0; the bias corrections 1 - beta^t undo that start, so step 1 moves every
// element by about lr * sign(g). Cost per step: about 12 flops, one sqrt and one division and
// 5 floats of memory traffic per element (read p, g, m, v; write p, m, v).
#pragma once

#include <span>
#include <vector>

#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

// The per-step scalars of the update, computed once in double (Adam::coefficients).
struct AdamCoefficients {
  float beta1;
  float beta2;
  float one_minus_beta1;
  float one_minus_beta2;
  float step_size;     // lr / (1 - beta1^t)
  float inv_sqrt_bc2;  // 1 / sqrt(1 - beta2^t)
  float eps;
  float decay;  // AdamW: 1 - lr * weight_decay
};

class Adam final : public Optimizer {
 public:
  // decoupled = true gives AdamW. Validates config; config.name is not consulted.
  Adam(const OptimizerConfig& config, std::vector<Segment> segments, bool decoupled);

  void step(float* params, const float* grads, double lr) override;
  // Every element goes through the same vector operations wherever a part is cut (adam.cc), so
  // parts give the bits of step().
  void step_range(float* params, std::span<const float* const> grads, double lr, std::int64_t begin,
                  std::int64_t end) override;
  // {"adam.exp_avg", "adam.exp_avg_sq"}, or "adamw." names for AdamW.
  std::vector<StateTensor> state() const override;
  void load_state(const std::vector<StateTensor>& state, std::int64_t steps) override;

 private:
  // This step's scalars (t = steps() + 1); checks lr.
  AdamCoefficients coefficients(double lr) const;
  // The rule over n elements of one range part, on the calling thread; the gradient is g, or
  // g + g2 when g2 is not null.
  void update(float* p, const float* g, const float* g2, float* m, float* v, std::int64_t n,
              const AdamCoefficients& c, bool weight_decay) const;

  bool decoupled_;
  double beta1_;
  double beta2_;
  float eps_;
  float weight_decay_;
  PlacedFloats exp_avg_;     // m, state_numel() floats
  PlacedFloats exp_avg_sq_;  // v, state_numel() floats
};

}  // namespace dtrain::optim
