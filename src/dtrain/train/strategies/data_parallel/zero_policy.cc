#include "dtrain/train/strategies/data_parallel/zero_policy.h"

#include <fmt/format.h>

namespace dtrain::train {

ZeroDecision decide_zero_stage(const std::string& setting, int ranks, const std::string& optimizer,
                               const std::string& allreduce, const std::string& compression) {
  if (setting == "1") return {true, "sharded (data_parallel.zero_stage = 1)"};
  if (setting == "0") return {false, "replicated (data_parallel.zero_stage = 0)"};
  if (ranks < 2) return {false, "replicated (auto: one rank)"};
  if (optimizer == "lars") {
    return {false, "replicated (auto: lars needs whole-tensor norms, which a shard may cut)"};
  }
  if (optimizer == "onebit_adam") {
    return {false, "replicated (auto: 1-bit Adam exchanges its whole momentum)"};
  }
  if (compression != "none") {
    return {false, fmt::format("replicated (auto: compressed buckets ({}) are exchanged whole)",
                               compression)};
  }
  if (allreduce != "ring") {
    return {false, fmt::format("replicated (auto: parallel.allreduce = {} is kept; the sharded "
                               "optimizer's collectives are ring ones)",
                               allreduce)};
  }
  return {true, fmt::format("sharded (auto: {} ranks, ring, {})", ranks, optimizer)};
}

}  // namespace dtrain::train
