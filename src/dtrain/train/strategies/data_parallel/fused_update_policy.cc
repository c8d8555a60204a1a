#include "dtrain/train/strategies/data_parallel/fused_update_policy.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/optim/optimizer.h"

namespace dtrain::train {

FusedUpdateDecision decide_fused_update(const std::string& setting,
                                        const FusedUpdateInputs& inputs) {
  if (setting == "false") return {false, "reduce-scatter (data_parallel.sum_in_update = false)"};
  std::string missing;
  if (!inputs.sharded) {
    missing = "the optimizer is not sharded (data_parallel.zero_stage)";
  } else if (inputs.overlap) {
    missing = "buckets overlap backward (data_parallel.overlap)";
  } else if (!inputs.shares_memory) {
    missing = "the ranks are processes, which do not share memory";
  } else if (!optim::updates_in_parts(inputs.optimizer)) {
    missing = fmt::format("optim.name = {} does not update in parts (sgd, adam and adamw do)",
                          inputs.optimizer);
  }
  if (missing.empty()) {
    return {true, fmt::format("fused ({}: ranks share memory, {})",
                              setting == "true" ? "data_parallel.sum_in_update = true" : "auto",
                              inputs.optimizer)};
  }
  if (setting == "true") {
    throw ConfigError(
        fmt::format("config key 'data_parallel.sum_in_update' = true cannot apply: {}; set it to "
                    "\"auto\" or false",
                    missing));
  }
  return {false, fmt::format("reduce-scatter (auto: {})", missing)};
}

}  // namespace dtrain::train
