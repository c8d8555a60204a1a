// The robust reducer (issue 21; docs/ROBUST.md, "Using it"): each bucket's gradients are
// allgathered, so that every rank holds every rank's gradient, and combined by a robust aggregator
// of aggregate/ (median, trimmed mean, Krum, centered clipping, ...) instead of summed. Optionally
// the last f ranks are Byzantine: their rows are replaced by an attack of aggregate/attack.h before
// the aggregation.
//
// Per bucket of n elements, on P ranks:
//   1. rows: this rank's gradient times P. The caller scales each rank's loss gradient to its share
//      of the global batch (count_r / global_count, gradient_synchronizer.h), so P x that is the
//      gradient of the rank's own mean loss when the shares are equal: the units one worker's
//      gradient has in the papers, which is what centered clipping's tau and the noise attack's
//      sigma are measured in. (Uneven shares, a global batch not divisible by P, weight a rank by
//      P count_r / global_count, within one sample of 1.)
//   2. allgather (ring, f32): gathered (P, n) row-major, rank r's row at r n. Bytes sent per rank:
//      (P-1) x 4n, against 2 (P-1)/P x 4n for a ring allreduce: P/2 times as many.
//   3. attack (attack != none): rows P-f .. P-1 replaced, in rank order. Every rank holds the
//      honest rows after the allgather and computes the same Byzantine rows from them,
//      deterministically, so this simulates an omniscient attacker that sees the honest gradients
//      of the step before it sends (ALIE, IPM need that), as the papers' experiments do; signflip
//      and scale use the attacking rank's own honest row, noise a pure function of (seed, bucket
//      step, rank).
//   4. aggregate the P rows into the bucket: out (n) = aggregator(gathered). With the mean this is
//      the plain allreduce's sum to rounding (the mean of P x g_r is the sum of g_r); the reducer
//      contract (gradient_reducer.h) is that sum, the gradient of the global batch's mean loss.
// Every rank aggregates the same bytes in the same order with its own aggregator of the same
// state, so every rank's bucket ends bit-identical; nothing here depends on timing.
//
// One aggregator per bucket: centered clipping keeps its centre (the bucket's previous aggregate)
// and bucketing draws a new shuffle per call; aggregators of different buckets that share the seed
// draw the same shuffle in the same step, so the buckets of one step are grouped alike.
// Coordinate-wise aggregators (mean, median, trimmed mean) are exact per bucket. Krum, Multi-Krum
// and centered clipping use whole-vector distances and norms: per bucket they select (or clip) each
// bucket on its own, an approximation of whole-gradient Krum unless the gradient is one bucket,
// which data_parallel's "auto" bucket size gives robust runs (data_parallel_strategy.cc).
//
// Cost per bucket and step: the allgather, the aggregator's (aggregate/*.h: O(P n) for median and
// trimmed mean, P(P-1)/2 n for Krum's distances, 2 L P n for centered clipping), the attack's
// (O(n), ALIE and IPM O((P - f) n)), and P n floats of memory for the gathered rows.
//
// Overlap: reduce_async() scales and starts the allgather from the calling thread (so collectives
// are issued in bucket order, as the communicator's sequence numbers require) and aggregates on a
// thread of this reducer once it is done; the returned Work ends after the aggregation.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "dtrain/aggregate/aggregator.h"
#include "dtrain/aggregate/attack.h"
#include "dtrain/comm/task_queue.h"
#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::parallel {

struct RobustOptions {
  std::string aggregator = "mean";  // an aggregate::parse_aggregator spec
  std::string attack = "none";      // "none" or an aggregate::parse_attack spec
  int byzantine = 0;                // f: the last f ranks attack; Krum's f
  std::uint64_t seed = 0;           // bucketing's shuffles and the noise attack
  // beta > 0: each rank sends its momentum m_r = beta m_r + P g_r in place of P g_r (worker
  // momentum, Karimireddy et al. ICML 2021), so the aggregator combines momenta, whose noise is
  // about (1 - beta) / (1 + beta) of the gradients' variance; with the mean this is SGD with
  // momentum beta (the optimizer's momentum is then 0).
  float worker_momentum = 0.0f;
};

class RobustReducer final : public GradientReducer {
 public:
  // Throws ConfigError (with the numbers) when the aggregator cannot take P = comm.size() inputs
  // with f Byzantine (Krum: P > 2f + 2), when f >= P, or for an attack with f = 0.
  RobustReducer(const ReducerContext& context, const RobustOptions& options);
  ~RobustReducer() override;

  // "median allgather", "krum allgather + alie on 2 rank(s)".
  const char* collective() const override { return collective_.c_str(); }
  std::string algorithm() const override { return "ring"; }
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;

  // For tests: bucket b's gathered rows of the last exchange, (P, n), after the attack.
  const std::vector<float>& gathered(std::size_t b) const { return states_[b].gathered; }

  // This rank's worker momentum of every bucket, in bucket order (empty without it), for
  // checkpoints; load_momentum takes the same back (InternalError on another size).
  std::vector<float> momentum() const;
  void load_momentum(const std::vector<float>& values);

  // What the aggregators keep between steps (centered clipping's centre, bucketing's shuffle
  // count) and each bucket's step count (the noise attack's stream), the same on every rank, for
  // checkpoints: [buckets, then per bucket steps, k, k values], each double stored as its raw bits
  // in two floats (a rounding to float would break the bitwise resume). load_aggregator_state
  // returns false, changing nothing, when the values do not fit these buckets.
  std::vector<float> aggregator_state() const;
  bool load_aggregator_state(std::span<const float> values);

 private:
  struct BucketState {
    std::vector<float> gathered;  // (P, n): every rank's row
    std::vector<float> momentum;  // (n): this rank's worker momentum (worker_momentum > 0)
    std::unique_ptr<aggregate::Aggregator> aggregator;
    std::int64_t steps = 0;
  };

  std::size_t index_of(const GradientBucket& bucket) const;
  // grads *= P (the rows' units, step 1 above); then, with worker momentum, grads = m = beta m +
  // grads.
  void scale(const GradientBucket& bucket, float* grads);
  // Steps 3 and 4: the attack on the gathered rows, then the aggregate into grads.
  void combine(std::size_t b, const GradientBucket& bucket, float* grads);

  RobustOptions options_;
  std::unique_ptr<aggregate::Attack> attack_;  // null: no attack
  std::string collective_;
  comm::CollectiveOptions gather_options_;  // allgather has one algorithm (ring)
  std::vector<BucketState> states_;
  // Aggregates async exchanges; declared last so that it drains before the buffers above go.
  comm::TaskQueue combiner_;
};

// Built once the buckets exist (GradientSynchronizer's DataParallelOptions::reducer).
ReducerFactory robust_reducer(const RobustOptions& options);

// Whether a run's settings need the robust reducer: an aggregator other than the mean, or an
// attack (the mean with an attack is the allgather path too, so that the attack can be applied).
// The mean without attack is the plain allreduce.
bool needs_robust_reducer(const std::string& aggregator, const std::string& attack);

}  // namespace dtrain::parallel
