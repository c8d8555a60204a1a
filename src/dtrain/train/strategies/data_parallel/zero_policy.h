// Whether allreduce training shards its optimizer over the ranks (ZeRO-1) or replicates it (DDP).
//
// Sharding reduce-scatters each gradient bucket, updates 1/P of the parameters and keeps 1/P of the
// optimizer state on each rank, then allgathers the parameters: the same bytes as a ring allreduce,
// 1/P of the update's work and state, and the same numbers to rounding (docs/PARALLEL.md). It
// measured the faster of the two with 2 workers (docs/PERFORMANCE.md), so "auto" shards wherever
// it applies:
//   more than one rank, an element-wise optimizer (LARS needs whole-tensor norms, which a shard may
//   cut), parallel.allreduce = "ring" (the sharded collectives are ring ones: with another
//   algorithm chosen, the user is comparing that algorithm, so its allreduce is kept) and no
//   gradient compression (a compressed bucket is exchanged whole: docs/COMPRESSION.md).
// data_parallel.zero_stage = "0" and "1" force the choice (Config rejects "1" where it cannot
// apply).
#pragma once

#include <string>

namespace dtrain::train {

struct ZeroDecision {
  bool shard = false;
  std::string reason;  // for the run banner: "sharded (auto: 2 ranks, ring, sgd)"
};

// setting: "auto", "0" or "1" (Config validates it); ranks >= 1; optimizer, allreduce and
// compression as in the config (optim.name, parallel.allreduce, data_parallel.compression).
ZeroDecision decide_zero_stage(const std::string& setting, int ranks, const std::string& optimizer,
                               const std::string& allreduce,
                               const std::string& compression = "none");

}  // namespace dtrain::train
