// The gradient bucket size of allreduce training (tensor fusion): data_parallel.bucket_bytes.
//
// Buckets exist so that a bucket's collective can start while backward still computes the
// gradients of earlier layers (overlap). Without overlap they only cut one collective into several
// that run one after another, each paying its own hand-shake and wait for the slowest rank, and
// under ZeRO-1 cutting each rank's shard into as many pieces. So "auto" (the default) fuses:
//   overlap on    1 MiB buckets (kOverlapBucketBytes), as DDP and Horovod bucket for overlap;
//   overlap off   one bucket holding every gradient.
// Without overlap one bucket measured faster than 1 MiB buckets (`dtrain bench scaling --workers
// 1,2`, alternated pairs; the figures are in docs/PERFORMANCE.md). A number (bytes; 0 = one
// bucket per tensor) is obeyed.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::train {

inline constexpr std::int64_t kOverlapBucketBytes = std::int64_t{1} << 20;

struct FusionDecision {
  std::int64_t bytes = 0;  // the GradientSynchronizer's fusion_bytes
  std::string reason;      // for the run banner: "one bucket (auto: no overlap)"
};

// setting: "auto" or a byte count >= 0 (Config validates it); overlap: what decide_overlap chose;
// gradient_bytes: 4 x the model's parameters (the size of one bucket holding them all).
FusionDecision decide_fusion_bytes(const std::string& setting, bool overlap,
                                   std::int64_t gradient_bytes);

}  // namespace dtrain::train
