// Synchronous data parallelism (parallel.strategy = "data_parallel"; docs/PARALLEL.md), as Horovod
// and PyTorch DDP do it: every rank holds a replica, takes its share of each global batch through
// forward and backward, and the ranks' gradients are summed bucket by bucket
// (parallel::GradientSynchronizer: tensor fusion, overlap with backward) before one identical
// update on every rank. What a bucket's exchange is, is a reducer (parallel/gradient_reducer.h),
// chosen once from the policies beside this file: plain allreduce; ZeRO-1 (zero_policy.h), where
// each rank keeps the optimizer state of its shard only (reduce-scatter, update 1/P, allgather the
// parameters); for ranks that are threads, ZeRO-1 with the shard's gradient sums formed inside
// the update (fused_update_policy.h); a codec of compress/ (compressed_reducer.h); or, with
// data_parallel.aggregator other than mean or a gradient attack, Byzantine-robust aggregation
// (robust_reducer.h: allgather each bucket, aggregate the P rows; docs/ROBUST.md). Robust runs are
// replicated (zero_stage auto -> 0) and, with bucket_bytes auto, one bucket, so that Krum and
// centered clipping see the whole gradient. data_parallel.attack = "labelflip" flips the labels of
// the last data_parallel.byzantine ranks' shares (y -> C - 1 - y) before forward.
//
// Setup: the ranks check that config and parameter layout agree (the Trainer) and take rank 0's
// parameters (broadcast). Checkpoints hold the whole optimizer state, in the layout of an unsharded
// run (ZeRO-1 gathers its shards), so a run resumes sharded or not; with compression, also every
// rank's error-feedback residual and codec steps under "rank<r>/compression/..."
// (per_rank_state.h), taken back by a resume on as many ranks (bitwise) and restarted at zero on
// another count.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dtrain/compress/codec_spec.h"
#include "dtrain/parallel/gradient_synchronizer.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"
#include "dtrain/parallel/reducers/onebit_adam_reducer.h"
#include "dtrain/parallel/reducers/robust_reducer.h"
#include "dtrain/parallel/sync_batch_norm.h"
#include "dtrain/train/strategies/data_parallel/fused_update_policy.h"
#include "dtrain/train/strategies/data_parallel/fusion_policy.h"
#include "dtrain/train/strategies/data_parallel/overlap_policy.h"
#include "dtrain/train/strategies/data_parallel/zero_policy.h"
#include "dtrain/train/strategy.h"

namespace dtrain::train {

// data_parallel.compression with its error_feedback setting applied.
compress::CodecSpec codec_spec(const DataParallelSection& config);

class DataParallel final : public Strategy {
 public:
  // Collective over context.comm (which must be set): broadcasts rank 0's parameters.
  explicit DataParallel(const StrategyContext& context);
  std::string name() const override { return "data_parallel"; }
  std::vector<optim::Segment> optimizer_segments() const override;
  StepResult step(const StepInput& input, optim::Optimizer& optimizer) override;
  std::vector<optim::StateTensor> checkpoint_state(const optim::Optimizer& optimizer) override;
  bool reshards_checkpoints() const override { return true; }
  // The gradients' allreduce runs after backward (or from its hooks, not passed in a warm-up);
  // only synchronized batch norm talks inside forward.
  bool forward_backward_is_local() const override { return bn_reducer_ == nullptr; }
  void restore_state(std::vector<optim::StateTensor> state, std::int64_t optimizer_steps,
                     optim::Optimizer& optimizer, const std::string& path) override;
  std::vector<std::string> describe() const override;
  nlohmann::json summary(const RunTotalsView& totals) override;

 private:
  bool sharded() const { return sync_->reducer().sharded(); }
  bool fused() const { return !sync_->reducer().per_bucket(); }
  // Takes this rank's compression state (error feedback's residual, ...) or worker momentum out of
  // a checkpoint's and hands it to the compressed or robust reducer: with the same number of
  // ranks, else they restart at zero and rank 0 says so.
  void restore_compression_state(std::vector<optim::StateTensor>& state, const std::string& path);
  // Takes "robust/aggregator_state" out of a checkpoint's state and loads it into the robust
  // reducer (centered clipping's centre, bucketing's shuffle count); a checkpoint without it, or
  // with other buckets, restarts them and rank 0 says so.
  void restore_aggregator_state(std::vector<optim::StateTensor>& state, const std::string& path);

  comm::Communicator& comm_;
  OverlapDecision overlap_;            // data_parallel.overlap resolved for this host
  ZeroDecision zero_;                  // data_parallel.zero_stage resolved for this run
  FusedUpdateDecision fused_;          // data_parallel.sum_in_update resolved
  compress::CodecSpec codec_;          // data_parallel.compression and error_feedback
  FusionDecision fusion_;              // data_parallel.bucket_bytes resolved
  bool robust_ = false;                // the robust reducer (aggregator or gradient attack)
  bool flips_labels_ = false;          // attack labelflip, and this rank is one of the last f
  std::int64_t classes_ = 0;           // labelflip's C: the model's outputs per position
  std::vector<std::int32_t> flipped_;  // labelflip: this step's labels, flipped
  parallel::CompressedReducer* compressed_ = nullptr;  // the reducer, when it is one
  parallel::RobustReducer* robust_reducer_ = nullptr;  // the reducer, when it is one
  parallel::OneBitAdamReducer* onebit_ = nullptr;      // the reducer, when it is one
  std::unique_ptr<parallel::GradientSynchronizer> sync_;
  std::unique_ptr<parallel::SyncBatchNormReducer> bn_reducer_;
};

}  // namespace dtrain::train
