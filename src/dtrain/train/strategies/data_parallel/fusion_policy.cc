#include "dtrain/train/strategies/data_parallel/fusion_policy.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtrain::train {

FusionDecision decide_fusion_bytes(const std::string& setting, bool overlap,
                                   std::int64_t gradient_bytes) {
  if (setting != "auto") {
    const std::int64_t bytes = std::stoll(setting);
    return {bytes, bytes == 0
                       ? "one bucket per tensor (data_parallel.bucket_bytes = 0)"
                       : fmt::format("buckets of <= {} bytes (data_parallel.bucket_bytes)", bytes)};
  }
  if (overlap) {
    return {kOverlapBucketBytes,
            fmt::format("buckets of <= {} bytes (auto: overlap on)", kOverlapBucketBytes)};
  }
  return {std::max<std::int64_t>(gradient_bytes, 1), "one bucket (auto: no overlap)"};
}

}  // namespace dtrain::train
