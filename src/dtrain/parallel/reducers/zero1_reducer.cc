#include "dtrain/parallel/reducers/zero1_reducer.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"
#include "dtrain/comm/comm_error.h"
#include "dtrain/parallel/optimizer_shards.h"

namespace dtrain::parallel {

Zero1Reducer::Zero1Reducer(const ReducerContext& context)
    : GradientReducer(context),
      shard_(shard_segments(context.model.store().param_entries(), context.buckets,
                            context.comm.rank(), context.comm.size())),
      block_collective_(context.collective) {
  block_collective_.algorithm.clear();
}

void Zero1Reducer::reduce(const GradientBucket& bucket, float* grads) {
  context_.comm.reduce_scatter_blocks(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                                      block_collective_);
}

comm::Work Zero1Reducer::reduce_async(const GradientBucket& bucket, float* grads) {
  return context_.comm.reduce_scatter_blocks_async(grads, bucket.count, DType::kF32,
                                                   comm::ReduceOp::kSum, block_collective_);
}

void Zero1Reducer::gather_parameters() {
  comm::Communicator& comm = context_.comm;
  for (std::size_t i = 0; i < context_.buckets.size(); ++i) {
    const GradientBucket& b = context_.buckets[i];
    try {
      comm.allgather_blocks(context_.model.store().params() + b.offset, b.count, DType::kF32,
                            block_collective_);
    } catch (const Error& e) {
      throw comm::CommError(fmt::format("rank {}: allgather of parameter bucket {} ({}): {}",
                                        comm.rank(), i, b.name, e.what()));
    }
  }
}

FusedZero1Reducer::FusedZero1Reducer(const ReducerContext& context) : Zero1Reducer(context) {
  comm::Communicator& comm = context.comm;
  if (!comm.shares_memory()) {
    throw InternalError("FusedZero1Reducer needs ranks that share memory (threads of a process)");
  }
  nn::ParamStore& store = context.model.store();
  const std::vector<const void*> addresses =
      comm.exchange_addresses(store.grads(), store.grads_storage());
  // The ring reduce-scatter's order (comm/algorithms/reduce_scatter_ring.cc): block r starts at
  // rank r + 1 and gathers one rank per hop, this rank's own last.
  const int ranks = comm.size();
  for (int k = 1; k <= ranks; ++k) {
    const auto from = static_cast<std::size_t>((comm.rank() + k) % ranks);
    rank_grads_.push_back(static_cast<const float*>(addresses[from]));
  }
}

void FusedZero1Reducer::reduce(const GradientBucket& /*bucket*/, float* /*grads*/) {
  throw InternalError("FusedZero1Reducer exchanges nothing per bucket (per_bucket() is false)");
}

comm::Work FusedZero1Reducer::reduce_async(const GradientBucket& /*bucket*/, float* /*grads*/) {
  throw InternalError("FusedZero1Reducer exchanges nothing per bucket (per_bucket() is false)");
}

void FusedZero1Reducer::update(optim::Optimizer& optimizer, double lr) {
  float* params = context_.model.store().params();
  for (const optim::Segment& piece : shard_) {
    optimizer.step_range(params, rank_grads_, lr, piece.offset, piece.offset + piece.numel);
  }
  optimizer.finish_step();
}

ReducerFactory zero1_reducer() {
  return [](const ReducerContext& context) { return std::make_unique<Zero1Reducer>(context); };
}

ReducerFactory fused_zero1_reducer() {
  return [](const ReducerContext& context) { return std::make_unique<FusedZero1Reducer>(context); };
}

}  // namespace dtrain::parallel
