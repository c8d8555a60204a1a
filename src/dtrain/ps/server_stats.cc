#include "dtrain/ps/server_stats.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::ps {

void ServerStats::record(std::int64_t staleness_steps, std::int64_t lag_updates) {
  ++applied;
  const std::int64_t s = std::max<std::int64_t>(staleness_steps, 0);
  const std::int64_t u = std::max<std::int64_t>(lag_updates, 0);
  ++staleness[static_cast<std::size_t>(std::min(s, kHistogramBins - 1))];
  ++update_lag[static_cast<std::size_t>(std::min(u, kHistogramBins - 1))];
  max_staleness = std::max(max_staleness, s);
  max_update_lag = std::max(max_update_lag, u);
}

std::int64_t ServerStats::encoded_size(std::int64_t workers) {
  return 6 + 2 * kHistogramBins + 1 + 2 * workers;
}

std::vector<std::int64_t> ServerStats::encode() const {
  std::vector<std::int64_t> out{version,       applied,        dropped,
                                max_staleness, max_update_lag, kHistogramBins};
  out.insert(out.end(), staleness.begin(), staleness.end());
  out.insert(out.end(), update_lag.begin(), update_lag.end());
  out.push_back(static_cast<std::int64_t>(pushes.size()));
  out.insert(out.end(), pushes.begin(), pushes.end());
  out.insert(out.end(), dead.begin(), dead.end());
  return out;
}

ServerStats ServerStats::decode(std::span<const std::int64_t> v) {
  DTRAIN_CHECK(v.size() >= static_cast<std::size_t>(encoded_size(0)) && v[5] == kHistogramBins,
               "malformed parameter-server stats");
  ServerStats s;
  s.version = v[0];
  s.applied = v[1];
  s.dropped = v[2];
  s.max_staleness = v[3];
  s.max_update_lag = v[4];
  const auto bins = static_cast<std::size_t>(kHistogramBins);
  std::copy_n(v.begin() + 6, bins, s.staleness.begin());
  std::copy_n(v.begin() + 6 + static_cast<std::ptrdiff_t>(bins), bins, s.update_lag.begin());
  std::size_t at = 6 + 2 * bins;
  const auto workers = static_cast<std::size_t>(v[at++]);
  DTRAIN_CHECK(v.size() == at + 2 * workers, "malformed parameter-server stats");
  s.pushes.assign(v.begin() + static_cast<std::ptrdiff_t>(at),
                  v.begin() + static_cast<std::ptrdiff_t>(at + workers));
  s.dead.assign(v.begin() + static_cast<std::ptrdiff_t>(at + workers), v.end());
  return s;
}

}  // namespace dtrain::ps
