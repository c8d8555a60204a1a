// Averages the flat gradient buffer over the ranks of a communicator, bucket by bucket, overlapping
// the allreduces with backward (Horovod's tensor fusion + PyTorch DDP's bucketed overlap).
//
// One step:  begin_step()  ->  Model::backward(dy, [&](i) { on_layer_done(i); })  ->  finish()
// on_layer_done(i) launches, on the communicator's background thread (allreduce_async), every
// bucket whose gradients became final with layer i, while backward goes on computing layers below
// i; finish() launches what is left (everything, with overlap off) and waits for all buckets.
// Launch order is the same on every rank (buckets in reverse parameter order, each launched after
// the same layer), which is what keeps the collectives' sequence numbers in step across ranks.
// With overlap off, finish() reduces the buckets itself with blocking calls, in the same order.
//
// The allreduce is a sum: the caller scales its loss gradient so that the sum over ranks is the
// gradient of the global batch's mean loss (dy x count_r / global_count), which makes uneven shards
// exact too.
//
// Timing (for the trace and the compute / communication / waiting split): async collectives run one
// at a time in submission order, so a bucket's allreduce ran from max(its launch, the previous
// bucket's end) to its end (Work::finished_at()); waiting is the time finish() blocked.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/work.h"
#include "dtrain/nn/model.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_buckets.h"

namespace dtrain::parallel {

struct DataParallelOptions {
  // An allreduce algorithm name (comm::allreduce_algorithms()); empty: the communicator's default.
  std::string algorithm;
  // Bucket size limit (gradient_buckets.h); 0 = one allreduce per tensor.
  std::int64_t fusion_bytes = std::int64_t{1} << 20;
  // Start each bucket's allreduce during backward, on the communicator's thread; off: all of them
  // after backward, on the calling thread (blocking calls, no thread hand-off).
  bool overlap = true;
  // After this long waiting for one bucket, log a stall warning naming it (Horovod's stall
  // inspector); the communicator's deadline later turns a persistent stall into an error.
  std::chrono::milliseconds stall_warning{10000};
  // The communicator's per-call header check on bucket allreduces: a round trip through rank 0
  // per bucket. The buckets agree by construction once the ranks have compared their parameter
  // layouts (rank_agreement.h), so it can go; the deadline still ends any stall.
  bool check_headers = true;
  // ZeRO stage 1 (optimizer_shards.h): reduce-scatter each bucket instead of allreducing it, so
  // that rank r holds the summed gradients of block r of every bucket; the caller updates those
  // blocks only (shard_segments()) and then calls gather_parameters(). Uses ring collectives
  // whatever `algorithm` says.
  bool shard_optimizer = false;
  // With shard_optimizer, no overlap and ranks that share memory (Communicator::shares_memory):
  // finish() only waits at a barrier, and reduce_and_update() updates this rank's shard with the
  // sum of every rank's gradient buffer, read in place in the update's own loop
  // (optim::Optimizer::step_range), so the summed gradient is never stored
  // (train/strategies/data_parallel/fused_update_policy.h). The sums run in the ring reduce-scatter's order, so the numbers
  // are the reduce-scatter's bit for bit.
  bool fused_update = false;
};

struct BucketTiming {
  using Clock = std::chrono::steady_clock;
  Clock::time_point launched;  // on the compute thread
  Clock::time_point started;   // the allreduce began on the communication thread
  Clock::time_point finished;
};

class GradientSynchronizer {
 public:
  GradientSynchronizer(comm::Communicator& comm, nn::Model& model, DataParallelOptions options);

  void begin_step();
  // Model::backward's after_layer callback.
  void on_layer_done(std::size_t layer);
  // Launches the buckets not launched yet, then waits for every bucket; afterwards the gradient
  // buffer holds the sum over ranks. Rethrows a bucket's error (with the bucket named).
  void finish();

  const std::vector<GradientBucket>& buckets() const { return buckets_; }
  const DataParallelOptions& options() const { return options_; }
  // Of the last finished step, one per bucket in launch order.
  const std::vector<BucketTiming>& timings() const { return timings_; }
  // Seconds finish() blocked in the last step.
  double wait_seconds() const { return wait_seconds_; }

  // With shard_optimizer: this rank's part of the parameters (optimizer segments), and the
  // allgather of every bucket's parameter blocks after the sharded update (blocking, on the
  // calling thread); returns its start and end for the trace. Rethrows with the bucket named.
  const std::vector<optim::Segment>& shard_segments() const { return shard_; }
  std::pair<BucketTiming::Clock::time_point, BucketTiming::Clock::time_point> gather_parameters();
  // "allreduce" or "reduce-scatter": what each bucket's gradients go through ("fused reduce"
  // with fused_update).
  const char* gradient_collective() const;

  // fused_update only, after finish(): one update of this rank's shard by `optimizer` (built over
  // shard_segments(), one that optim::updates_in_parts) with the gradients summed over the ranks;
  // counts the step. Reads every rank's gradient buffer, which no rank writes again before the
  // gather_parameters() that follows: each rank sends its parameter block there only after its
  // own update, and no rank leaves that allgather before it has every other rank's block.
  void reduce_and_update(optim::Optimizer& optimizer, float* params, double lr);

 private:
  void launch(std::size_t bucket);
  void wait_for(std::size_t bucket);
  // Starts (async) or runs bucket's allreduce, or its reduce-scatter with shard_optimizer.
  void reduce(std::size_t bucket, bool async);

  comm::Communicator& comm_;
  nn::Model& model_;
  DataParallelOptions options_;
  std::vector<GradientBucket> buckets_;
  std::vector<optim::Segment> shard_;  // with shard_optimizer
  // With fused_update: every rank's gradient buffer, in the order the ring would add them.
  std::vector<const float*> rank_grads_;
  comm::CollectiveOptions collective_;        // of every bucket's allreduce, built once
  comm::CollectiveOptions block_collective_;  // the same for reduce_scatter/allgather_blocks
  std::vector<comm::Work> works_;
  std::vector<BucketTiming> timings_;
  std::size_t launched_ = 0;  // buckets [0, launched_) are in flight
  double wait_seconds_ = 0.0;
};

}  // namespace dtrain::parallel
