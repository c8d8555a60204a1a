#include "dtrain/ps/shard_layout.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::ps {

ShardLayout::ShardLayout(std::int64_t total, int servers) : total_(total), servers_(servers) {
  if (total < 0 || servers < 1) {
    throw ConfigError(fmt::format(
        "parameter server layout: {} keys over {} servers; need >= 0 keys and >= 1 server", total,
        servers));
  }
}

KeyRange ShardLayout::shard(int server) const {
  DTRAIN_CHECK(server >= 0 && server < servers_, "server {} of {}", server, servers_);
  return {total_ * server / servers_, total_ * (server + 1) / servers_};
}

std::vector<ShardPiece> ShardLayout::split(KeyRange range) const {
  if (range.begin < 0 || range.end < range.begin || range.end > total_) {
    throw ConfigError(fmt::format("parameter server: key range [{}, {}) is not inside [0, {})",
                                  range.begin, range.end, total_));
  }
  std::vector<ShardPiece> pieces;
  for (int s = 0; s < servers_ && range.size() > 0; ++s) {
    const KeyRange shard_range = shard(s);
    const std::int64_t begin = std::max(range.begin, shard_range.begin);
    const std::int64_t end = std::min(range.end, shard_range.end);
    if (begin < end) pieces.push_back({s, {begin, end}});
  }
  return pieces;
}

}  // namespace dtrain::ps
