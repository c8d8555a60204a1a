#include "dtrain/data/shuffled_sampler.h"

#include <numeric>
#include <utility>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::data {
namespace {

// rng_stream purpose of the epoch shuffles.
constexpr std::uint64_t kShufflePurpose = 0x5A3F'0001;

}  // namespace

ShuffledSampler::ShuffledSampler(std::int64_t size, std::uint64_t seed, bool shuffle)
    : size_(size), seed_(seed), shuffle_(shuffle) {
  if (size < 0) {
    throw ConfigError(fmt::format("ShuffledSampler: data set size must be >= 0, got {}", size));
  }
}

std::int64_t ShuffledSampler::rank_size(int ranks) const {
  DTRAIN_CHECK_GE(ranks, 1);
  return size_ / ranks;
}

std::vector<std::int64_t> ShuffledSampler::epoch_order(std::int64_t epoch) const {
  DTRAIN_CHECK_GE(epoch, 0);
  std::vector<std::int64_t> order(static_cast<std::size_t>(size_));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (!shuffle_) return order;
  Rng rng(seed_, rng_stream(kShufflePurpose, static_cast<std::uint64_t>(epoch)));
  for (std::size_t i = order.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

std::vector<std::int64_t> ShuffledSampler::rank_order(std::int64_t epoch, int rank,
                                                      int ranks) const {
  DTRAIN_CHECK_GE(ranks, 1);
  DTRAIN_CHECK(rank >= 0 && rank < ranks, "rank {} of {} ranks", rank, ranks);
  const std::vector<std::int64_t> order = epoch_order(epoch);
  const std::int64_t shard = rank_size(ranks);
  const auto begin = order.begin() + rank * shard;
  return std::vector<std::int64_t>(begin, begin + shard);
}

}  // namespace dtrain::data
