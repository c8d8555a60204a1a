// How a flat parameter vector of N floats is cut into key ranges, one per server, balanced by size:
// server s owns [N s / S, N (s + 1) / S), so shards differ by at most one element. Element-wise
// optimizers (SGD, Adam) do not care where a tensor is cut; per-tensor rules (LARS) do, which is
// why a parameter server does not run them (docs/PS.md).
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::ps {

// [begin, end) in elements of the flat parameter vector.
struct KeyRange {
  std::int64_t begin = 0;
  std::int64_t end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const KeyRange&) const = default;
};

// The part of a requested range that one server holds.
struct ShardPiece {
  int server = 0;
  KeyRange range;  // global keys, inside the server's shard
};

class ShardLayout {
 public:
  ShardLayout() = default;
  // total >= 0 keys over servers >= 1 servers; ConfigError otherwise.
  ShardLayout(std::int64_t total, int servers);

  std::int64_t total() const { return total_; }
  int servers() const { return servers_; }
  KeyRange shard(int server) const;
  // The pieces of `range` (inside [0, total), else ConfigError naming both), in key order, one per
  // server it touches; an empty range has no pieces.
  std::vector<ShardPiece> split(KeyRange range) const;

 private:
  std::int64_t total_ = 0;
  int servers_ = 1;
};

}  // namespace dtrain::ps
