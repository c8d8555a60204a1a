// Schedules the exchange of the flat gradient buffer, bucket by bucket, overlapping it with
// backward (Horovod's tensor fusion + PyTorch DDP's bucketed overlap). What each bucket's exchange
// is, and how the update uses it, is the GradientReducer's (gradient_reducer.h: allreduce, ZeRO-1,
// fused ZeRO-1; later compressed and robust ones), as DDP's communication hooks are.
//
// One step:  begin_step()  ->  Model::backward(dy, [&](i) { on_layer_done(i); })  ->  finish()
//            ->  update(optimizer, lr)  ->  gather_parameters() when the reducer is sharded
// on_layer_done(i) launches, on the communicator's background thread (reduce_async), every
// bucket whose gradients became final with layer i, while backward goes on computing layers below
// i; finish() launches what is left (everything, with overlap off) and waits for all buckets.
// Launch order is the same on every rank (buckets in reverse parameter order, each launched after
// the same layer), which is what keeps the collectives' sequence numbers in step across ranks.
// With overlap off, finish() reduces the buckets itself with blocking calls, in the same order. A
// reducer that exchanges nothing per bucket (fused ZeRO-1) makes finish() a barrier.
//
// The exchange is a sum: the caller scales its loss gradient so that the sum over ranks is the
// gradient of the global batch's mean loss (dy x count_r / global_count), which makes uneven shards
// exact too.
//
// Timing (for the trace and the compute / communication / waiting split): async collectives run one
// at a time in submission order, so a bucket's exchange ran from max(its launch, the previous
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
#include "dtrain/parallel/gradient_reducer.h"

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
  // What each bucket's exchange is (gradient_reducer.h); null: allreduce_reducer().
  ReducerFactory reducer;
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
  // The reducer refers to buckets_: the synchronizer stays where it was built.
  GradientSynchronizer(const GradientSynchronizer&) = delete;
  GradientSynchronizer& operator=(const GradientSynchronizer&) = delete;

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

  const GradientReducer& reducer() const { return *reducer_; }
  // What each bucket's gradients go through ("allreduce", "reduce-scatter", "fused reduce").
  const char* gradient_collective() const { return reducer_->collective(); }
  // The parameter ranges this rank's optimizer updates (reducer_->update_segments()).
  std::vector<optim::Segment> update_segments() const { return reducer_->update_segments(); }
  // After finish(): the update with the reduced gradients, by `optimizer` (built over
  // update_segments()).
  void update(optim::Optimizer& optimizer, double lr) { reducer_->update(optimizer, lr); }
  // After update(), with a sharded reducer: the parameter allgather (blocking, on the calling
  // thread); returns its start and end for the trace. Rethrows with the bucket named.
  std::pair<BucketTiming::Clock::time_point, BucketTiming::Clock::time_point> gather_parameters();

 private:
  void launch(std::size_t bucket);
  void wait_for(std::size_t bucket);
  // Starts (async) or runs the reducer's exchange of `bucket`.
  void reduce(std::size_t bucket, bool async);

  comm::Communicator& comm_;
  nn::Model& model_;
  DataParallelOptions options_;
  std::vector<GradientBucket> buckets_;
  comm::CollectiveOptions barrier_options_;  // the barrier of a reducer without per-bucket work
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<comm::Work> works_;
  std::vector<BucketTiming> timings_;
  std::size_t launched_ = 0;  // buckets [0, launched_) are in flight
  double wait_seconds_ = 0.0;
};

}  // namespace dtrain::parallel
