// Which samples of an epoch's shuffled order a rank trains on, step by step.
//
// The Trainer visits data::ShuffledSampler(N, seed).epoch_order(e) in epoch e; a SharePlan says
// which part of that order each of this rank's steps takes. Strategies choose the plan
// (Strategy::share_plan): synchronous ones split global batches over the ranks (GlobalBatchPlan);
// asynchronous parameter servers hand out batches as tickets (strategies/parameter_server/).
#pragma once

#include <cstdint>
#include <optional>

namespace dtrain::data {

// Rank r's part of a global batch of `count` samples over P ranks: [count r / P, count (r + 1) /
// P), sizes differing by at most one.
struct RankShare {
  std::int64_t begin = 0;
  std::int64_t size = 0;
};
inline RankShare rank_share(std::int64_t count, int rank, int ranks) {
  const std::int64_t begin = count * rank / ranks;
  return {begin, count * (rank + 1) / ranks - begin};
}

// ConfigError unless a batch of `batch` samples gives each of `ranks` ranks at least one sample
// of each of its `accumulate` micro-batches.
void check_batch_covers_ranks(std::int64_t batch, int ranks, std::int64_t accumulate);

// This rank's samples of one step: positions [begin, begin + size) of the epoch's order.
struct Share {
  std::int64_t begin = 0;
  std::int64_t size = 0;
  std::int64_t batch = 0;     // samples of the whole step over all ranks
  std::int64_t scale_to = 0;  // the batch this share's gradient is a part of (weight size/scale_to)
};

class SharePlan {
 public:
  virtual ~SharePlan() = default;
  // Steps a rank takes in an epoch: its progress bar's length and the schedule's epoch.
  virtual std::int64_t steps_per_epoch() const = 0;
  // Starts epoch `epoch` at position `position` of its order (non-zero only when resuming).
  virtual void begin_epoch(std::int64_t epoch, std::int64_t position) = 0;
  // The next share of the epoch; none once the epoch is done.
  virtual std::optional<Share> next() = 0;
  // True when the ranks draw shares independently, so that one rank covers only part of an epoch
  // (tickets): the epoch then counts all its samples, and its loss is this rank's.
  virtual bool independent() const { return false; }
  // The position a checkpoint taken now, inside the epoch, resumes from (begin_epoch's), given
  // this rank's own `steps_position` (its steps in the epoch x the global batch). The same for
  // synchronous plans; tickets: the epoch's tickets handed out so far, over all ranks.
  virtual std::int64_t checkpoint_position(std::int64_t steps_position) { return steps_position; }
};

// Synchronous training: step s of an epoch is the global batch [s B, s B + B) of the order, split
// over the ranks by rank_share, the last partial batch included when every rank gets at least one
// sample of each of its `accumulate` micro-batches (else every rank skips it alike, so no rank
// waits for a batch that will not come). steps_per_epoch = N / B + (N % B >= P k ? 1 : 0).
class GlobalBatchPlan final : public SharePlan {
 public:
  // Throws ConfigError when the batch is smaller than ranks x accumulate, DataError when the data
  // set is.
  GlobalBatchPlan(std::int64_t train_samples, std::int64_t batch, int rank, int ranks,
                  std::int64_t accumulate);
  std::int64_t steps_per_epoch() const override { return steps_per_epoch_; }
  void begin_epoch(std::int64_t epoch, std::int64_t position) override;
  std::optional<Share> next() override;

 private:
  std::int64_t n_;
  std::int64_t batch_;
  int rank_;
  int ranks_;
  std::int64_t steps_per_epoch_ = 0;
  std::int64_t position_ = 0;
  std::int64_t step_ = 0;
};

}  // namespace dtrain::data
