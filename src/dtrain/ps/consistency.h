// When a parameter server applies a worker's gradient, and when it lets a worker go on
// (seed 004: bulk-synchronous, asynchronous Downpour SGD, stale-synchronous parallel).
//
//   bsp    a step completes when every worker has pushed its gradient for it (or the first
//          W - b of them with b backup workers): the same update as synchronous allreduce
//          training; late gradients are counted and dropped, never applied to another step
//   async  every push is applied as it arrives; a pull answers at once with what the server has
//   ssp    as async, but a worker more than `staleness` steps ahead of the slowest live worker
//          waits for it at its next pull (Ho et al. 2013); staleness 0 is lock-step
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtrain::ps {

enum class Consistency { kBsp, kAsync, kSsp };

std::string_view consistency_name(Consistency consistency);
// "bsp" | "async" | "ssp"; ConfigError naming the text and the accepted names otherwise.
Consistency parse_consistency(std::string_view name);
const std::vector<std::string>& consistency_names();

}  // namespace dtrain::ps
