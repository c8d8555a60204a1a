#include "dtrain/data/batch_plan.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::data {

void check_batch_covers_ranks(std::int64_t batch, int ranks, std::int64_t accumulate) {
  if (batch < ranks * accumulate) {
    throw ConfigError(fmt::format(
        "train.batch_size = {} is smaller than ranks x train.accumulate_steps = {} x {}: every "
        "rank needs at least one sample per micro-batch; raise train.batch_size",
        batch, ranks, accumulate));
  }
}

GlobalBatchPlan::GlobalBatchPlan(std::int64_t train_samples, std::int64_t batch, int rank,
                                 int ranks, std::int64_t accumulate)
    : n_(train_samples), batch_(batch), rank_(rank), ranks_(ranks) {
  check_batch_covers_ranks(batch, ranks, accumulate);
  const std::int64_t smallest = ranks * accumulate;
  steps_per_epoch_ = n_ / batch + (n_ % batch >= smallest ? 1 : 0);
  if (steps_per_epoch_ == 0) {
    throw DataError(fmt::format(
        "the training set has {} samples, fewer than ranks x train.accumulate_steps = {}: nothing "
        "to train on",
        n_, smallest));
  }
}

void GlobalBatchPlan::begin_epoch(std::int64_t /*epoch*/, std::int64_t position) {
  position_ = position;
  step_ = position / batch_;
}

std::optional<Share> GlobalBatchPlan::next() {
  if (position_ >= n_ || step_ >= steps_per_epoch_) return std::nullopt;
  const std::int64_t count = std::min(batch_, n_ - position_);
  const RankShare mine = rank_share(count, rank_, ranks_);
  const Share share{position_ + mine.begin, mine.size, count, count};
  position_ += batch_;
  ++step_;
  return share;
}

}  // namespace dtrain::data
