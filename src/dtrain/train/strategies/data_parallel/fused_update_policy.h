// Whether ZeRO-1 training sums each shard's gradients inside the optimizer update (fused) or
// reduce-scatters them first.
//
// Fused (parallel::FusedZero1Reducer, reducers/zero1_reducer.h): ranks that are threads of one
// process read each other's gradient buffers in place after a barrier; each rank forms its shard's
// sums over the ranks inside the update (optim::Optimizer::step_range: SGD with momentum on two
// ranks in the update's own loop, other cases 2048 elements at a time on the stack). The summed
// gradient is never written to the gradient buffer and read back, and no reduce-scatter messages
// are posted. It measured faster than reduce-scatter + update per step (docs/PERFORMANCE.md,
// "Gradient sums inside the update"), with the same numbers bit for bit for any number of ranks.
//
// data_parallel.sum_in_update = "auto" (the default) fuses where it applies: the optimizer is
// sharded (ZeRO-1), buckets do not overlap backward (overlap reduces during backward instead),
// every rank shares this process's memory (inproc: ranks as threads, not processes), and the
// optimizer updates in parts (SGD, Adam, AdamW; not LARS, optim/optimizer.h). "true" requires all
// four (ConfigError naming the one missing); "false" keeps the reduce-scatter.
#pragma once

#include <string>

namespace dtrain::train {

struct FusedUpdateInputs {
  bool sharded = false;        // ZeRO-1 decided (zero_policy.h)
  bool overlap = false;        // overlap decided (overlap_policy.h)
  bool shares_memory = false;  // Communicator::shares_memory()
  std::string optimizer;       // optim.name
};

struct FusedUpdateDecision {
  bool fused = false;
  std::string reason;  // for the run banner: "fused (auto: ranks share memory, adam)"
};

// setting: "auto", "true" or "false" (Config validates it).
FusedUpdateDecision decide_fused_update(const std::string& setting,
                                        const FusedUpdateInputs& inputs);

}  // namespace dtrain::train
