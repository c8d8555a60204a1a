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

#include <vector>

#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

class Adam final : public Optimizer {
 public:
  // decoupled = true gives AdamW. Validates config; config.name is not consulted.
  Adam(const OptimizerConfig& config, std::vector<Segment> segments, bool decoupled);

  void step(float* params, const float* grads, double lr) override;
  // {"adam.exp_avg", "adam.exp_avg_sq"}, or "adamw." names for AdamW.
  std::vector<StateTensor> state() const override;
  void load_state(const std::vector<StateTensor>& state, std::int64_t steps) override;

 private:
  bool decoupled_;
  double beta1_;
  double beta2_;
  float eps_;
  float weight_decay_;
  PlacedFloats exp_avg_;     // m, state_numel() floats
  PlacedFloats exp_avg_sq_;  // v, state_numel() floats
};

}  // namespace dtrain::optim
