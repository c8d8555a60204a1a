// What a parameter server records about the gradients it applied: how stale each was, how many
// came too late, and how far each worker got. A worker fetches every server's with
// Client::stop_with_stats() at the end of a run; summary.json holds them (docs/PS.md).
//
// Staleness of a gradient computed at worker step c on parameters pulled when the slowest live
// worker was at step m: c - m, in steps (Ho et al.'s clock difference; ssp bounds it by s, bsp
// makes it 0). Update lag: the shard's updates applied between that pull and this gradient
// (Downpour's view of staleness). Both histograms have kHistogramBins bins; the last one holds
// every value >= kHistogramBins - 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace dtrain::ps {

inline constexpr std::int64_t kHistogramBins = 64;

struct ServerStats {
  std::int64_t version = 0;  // updates applied to the shard
  std::int64_t applied = 0;  // gradients applied (bsp: counted into a step)
  std::int64_t dropped = 0;  // bsp: gradients that came after their step had completed
  std::vector<std::int64_t> staleness = std::vector<std::int64_t>(kHistogramBins, 0);
  std::vector<std::int64_t> update_lag = std::vector<std::int64_t>(kHistogramBins, 0);
  std::int64_t max_staleness = 0;
  std::int64_t max_update_lag = 0;
  std::vector<std::int64_t> pushes;  // per worker: gradients received
  std::vector<std::int64_t> dead;    // per worker: 1 when counted as dead (async / ssp)

  void record(std::int64_t staleness_steps, std::int64_t lag_updates);
  // As i64s for a reply, and back (ProtocolError-free: sizes are checked by the caller).
  std::vector<std::int64_t> encode() const;
  static ServerStats decode(std::span<const std::int64_t> values);
  // The number of i64s encode() writes for `workers` workers.
  static std::int64_t encoded_size(std::int64_t workers);
};

}  // namespace dtrain::ps
