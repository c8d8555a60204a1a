// The order in which an epoch visits a data set, and each data-parallel rank's share of it.
//
// Epoch e's order is a Fisher-Yates shuffle driven by the counter-based stream
// Rng(seed, rng_stream(purpose, e)), so it is a pure function of (seed, e): every rank computes
// the same permutation without communicating, and a run resumed at epoch e from a checkpoint sees
// exactly the order it would have seen. Cost: size draws and swaps per epoch.
//
// Rank shards are contiguous and equal: with P ranks each takes size / P indices,
//   rank r: order[r * (size / P), (r + 1) * (size / P)),
// and the last size % P indices of the epoch's order are DROPPED (none are padded or repeated).
// Equal shards keep synchronous data parallelism in step (every rank runs the same number of
// batches) and every sample keeps the same weight; since the order changes each epoch, a
// different handful of samples sits out each epoch. With shuffle = false the order is 0..size-1
// and the dropped samples are always the last size % P.
#pragma once

#include <cstdint>
#include <vector>

namespace dtrain::data {

class ShuffledSampler {
 public:
  // size >= 0 samples; ConfigError when negative.
  ShuffledSampler(std::int64_t size, std::uint64_t seed, bool shuffle = true);

  std::int64_t size() const { return size_; }
  // Indices each of `ranks` ranks takes per epoch: size / ranks.
  std::int64_t rank_size(int ranks) const;

  // A permutation of [0, size) (the identity when not shuffling); epoch >= 0.
  std::vector<std::int64_t> epoch_order(std::int64_t epoch) const;
  // Rank `rank`'s contiguous shard of epoch_order(epoch), rank_size(ranks) indices; 0 <= rank <
  // ranks. The remainder is dropped, as the comment above explains.
  std::vector<std::int64_t> rank_order(std::int64_t epoch, int rank, int ranks) const;

 private:
  std::int64_t size_;
  std::uint64_t seed_;
  bool shuffle_;
};

}  // namespace dtrain::data
