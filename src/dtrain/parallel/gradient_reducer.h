// GradientReducer: what a gradient bucket's exchange is. GradientSynchronizer schedules the
// buckets (fusion, launch order, overlap with backward, timings, stall warnings); a reducer decides
// what happens to each bucket's gradients and how the update uses the result, as PyTorch DDP's
// communication hooks do. Compression and robust aggregation plug in here as further reducers.
//
// The reducers of today (reducers/):
//   allreduce                 each bucket summed over the ranks (allreduce); every rank updates
//                             every parameter
//   zero1 (reduce-scatter)    ZeRO stage 1 (optimizer_shards.h): each bucket reduce-scattered, so
//                             rank r holds the summed gradients of block r of every bucket; the
//                             optimizer updates those blocks only, then the parameter allgather
//   zero1, fused              ZeRO-1 for ranks that share memory: no per-bucket exchange; after a
//                             barrier the update itself sums the shard's gradients over every
//                             rank's buffer, read in place, in the ring reduce-scatter's order (so
//                             the numbers are the reduce-scatter's bit for bit)
//
// The gradient buffer's sum, not its mean, is what a reducer produces: the caller scales its loss
// gradient so that the sum over ranks is the gradient of the global batch's mean loss.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "dtrain/comm/communicator.h"
#include "dtrain/comm/work.h"
#include "dtrain/nn/model.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_buckets.h"

namespace dtrain::parallel {

// What a reducer is built with; all of it outlives the reducer.
struct ReducerContext {
  comm::Communicator& comm;
  nn::Model& model;
  const std::vector<GradientBucket>& buckets;
  // Options of each bucket's collective (algorithm, header check), chosen by the synchronizer.
  comm::CollectiveOptions collective;
};

class GradientReducer {
 public:
  virtual ~GradientReducer() = default;
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // What a bucket's gradients go through, for messages and the trace ("allreduce",
  // "reduce-scatter", "fused reduce").
  virtual const char* collective() const = 0;
  // The algorithm of that collective, for the trace ("ring", or the allreduce's name).
  virtual std::string algorithm() const = 0;

  // True: buckets are exchanged one by one (reduce / reduce_async) as backward makes them ready.
  // False: nothing moves per bucket; finish() only waits at a barrier, and update() does the
  // exchange (the fused ZeRO-1 sum); such a reducer cannot overlap with backward.
  virtual bool per_bucket() const { return true; }

  // One bucket's exchange of `grads` (the bucket's first gradient), run here or started on the
  // communicator's thread (its Work). Only when per_bucket().
  virtual void reduce(const GradientBucket& bucket, float* grads) = 0;
  virtual comm::Work reduce_async(const GradientBucket& bucket, float* grads) = 0;

  // The parameter ranges this rank's optimizer updates: every tensor, or this rank's shard.
  virtual std::vector<optim::Segment> update_segments() const;
  // Whether update_segments() is a shard: the optimizer state is then this rank's part only.
  virtual bool sharded() const { return false; }
  // The update once the exchange is done: `optimizer` (built over update_segments()) steps the
  // parameters with the reduced gradients.
  virtual void update(optim::Optimizer& optimizer, double lr);
  // After update(): hands every rank the parameters it did not update (ZeRO-1: the allgather);
  // nothing by default. Rethrows naming the bucket.
  virtual void gather_parameters() {}

 protected:
  explicit GradientReducer(const ReducerContext& context) : context_(context) {}
  ReducerContext context_;
};

// Builds the reducer of a GradientSynchronizer once its buckets exist.
using ReducerFactory = std::function<std::unique_ptr<GradientReducer>(const ReducerContext&)>;

}  // namespace dtrain::parallel
