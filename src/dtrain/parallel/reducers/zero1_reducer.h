// ZeRO stage 1 (Rajbhandari et al. 2020; optimizer_shards.h): the optimizer state and update are
// sharded over the ranks.
//
//   Zero1Reducer       each bucket reduce-scattered (ring), so that rank r holds the summed
//                      gradients of block r of every bucket; the optimizer updates those blocks
//                      (update_segments()); then the parameter allgather. Bytes per rank and
//                      step: (P-1)/P x 4N for each, 2 (P-1)/P x 4N in all, as a ring allreduce.
//   FusedZero1Reducer  for ranks that share memory (Communicator::shares_memory): nothing moves
//                      per bucket; after a barrier, the update of this rank's shard reads every
//                      rank's gradient buffer in place and forms each element's sum in its own
//                      loop (optim::Optimizer::step_range), so the summed gradient is never
//                      stored. The sums run in the ring reduce-scatter's order (block r starts at
//                      rank r + 1, this rank's own gradient last), so the numbers are the
//                      reduce-scatter's bit for bit. Bytes: the allgather's only.
//
// Both use ring collectives whatever allreduce algorithm a run names.
#pragma once

#include <vector>

#include "dtrain/parallel/gradient_reducer.h"

namespace dtrain::parallel {

class Zero1Reducer : public GradientReducer {
 public:
  explicit Zero1Reducer(const ReducerContext& context);
  const char* collective() const override { return "reduce-scatter"; }
  std::string algorithm() const override { return "ring"; }
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;
  std::vector<optim::Segment> update_segments() const override { return shard_; }
  bool sharded() const override { return true; }
  void gather_parameters() override;

 protected:
  std::vector<optim::Segment> shard_;
  comm::CollectiveOptions block_collective_;  // ring: the block collectives have one algorithm
};

class FusedZero1Reducer final : public Zero1Reducer {
 public:
  // Collective (exchange_addresses): every rank's gradient buffer, kept alive by the world until
  // every rank has ended, so a rank that fails at the barrier cannot free what others still read.
  // InternalError when the ranks do not share memory.
  explicit FusedZero1Reducer(const ReducerContext& context);
  const char* collective() const override { return "fused reduce"; }
  bool per_bucket() const override { return false; }
  void reduce(const GradientBucket& bucket, float* grads) override;
  comm::Work reduce_async(const GradientBucket& bucket, float* grads) override;
  // Reads every rank's gradient buffer, which no rank writes again before the gather_parameters()
  // that follows: each rank sends its parameter block there only after its own update, and no
  // rank leaves that allgather before it has every other rank's block. The optimizer must be one
  // that optim::updates_in_parts. Counts the step.
  void update(optim::Optimizer& optimizer, double lr) override;

 private:
  std::vector<const float*> rank_grads_;  // in the order the ring would add them
};

ReducerFactory zero1_reducer();
ReducerFactory fused_zero1_reducer();

}  // namespace dtrain::parallel
