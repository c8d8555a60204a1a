// Stochastic gradient descent with optional momentum, Nesterov momentum and L2 weight decay, with
// PyTorch's torch.optim.SGD semantics (dampening 0).
//
// Per element, with wd = weight_decay on segments whose weight_decay flag is set and 0 elsewhere:
//   g = grad + wd * p
//   momentum == 0:  p -= lr * g
//   otherwise:      v = momentum * v + g            (v starts at 0, so v_1 = g_1 as in PyTorch,
//                                                     which initialises the buffer to g_1)
//                   update = nesterov ? g + momentum * v : v
//                   p -= lr * update
// Cost per step: about 6 flops and 4 floats of memory traffic per element (read p, g, v; write p,
// v).
#pragma once

#include <vector>

#include "dtrain/optim/optimizer.h"

namespace dtrain::optim {

class Sgd final : public Optimizer {
 public:
  // Validates config (validate_optimizer_config); config.name is not consulted.
  Sgd(const OptimizerConfig& config, std::vector<Segment> segments);

  void step(float* params, const float* grads, double lr) override;
  void step_range(float* params, std::span<const float* const> grads, double lr, std::int64_t begin,
                  std::int64_t end) override;
  // {"sgd.momentum"} when momentum > 0, else nothing.
  std::vector<StateTensor> state() const override;
  void load_state(const std::vector<StateTensor>& state, std::int64_t steps) override;

 private:
  // The rule over n elements (v null without momentum): over the compute pool, or on the calling
  // thread.
  void update(float* p, const float* g, float* v, std::int64_t n, float lr, float wd) const;
  void update_serial(float* p, const float* g, float* v, std::int64_t n, float lr, float wd) const;

  float momentum_;
  float weight_decay_;
  bool nesterov_;
  PlacedFloats velocity_;  // state_numel() floats when momentum > 0, else empty
};

}  // namespace dtrain::optim
