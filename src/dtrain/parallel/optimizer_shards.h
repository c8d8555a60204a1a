// ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter
// Models", 2020): each of P data-parallel ranks keeps the optimizer state of, and updates, only
// 1/P of the parameters.
//
// One step: backward -> reduce_scatter_blocks of every gradient bucket (rank r ends with the sum
// of block r of each bucket) -> the optimizer updates rank r's blocks only -> allgather_blocks of
// every parameter bucket. The bytes on the wire are those of an allreduce (a ring allreduce IS a
// reduce-scatter and an allgather), but the update and the optimizer state shrink to 1/P per rank.
//
// Rank r's shard: block r (comm/algorithms/blocks.h: [count r / P, count (r + 1) / P)) of every
// bucket, cut at the parameter tensors' borders so that each piece keeps its tensor's name and
// weight-decay flag. Element-wise update rules (SGD, Adam, AdamW) give bit-identical results on a
// shard; LARS takes a norm per tensor and a block may cut a tensor, so it is refused.
//
// Checkpoints hold the full optimizer state (the same file as a run without sharding, so either can
// resume the other): expand_state() places a shard's packed state into a zero-filled vector of the
// whole model, an allreduce (sum) of those assembles the full state exactly (every element is
// non-zero on at most one rank), and pack_state() takes a shard's part back out.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/nn/param_store.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/parallel/gradient_buckets.h"

namespace dtrain::parallel {

// Rank `rank`'s segments among `ranks`, in increasing parameter offset (the optimizer's state
// layout). Empty pieces are left out; a rank may own nothing when a bucket has fewer elements than
// ranks.
std::vector<optim::Segment> shard_segments(const std::vector<nn::ParamEntry>& entries,
                                           const std::vector<GradientBucket>& buckets, int rank,
                                           int ranks);

// packed: one state vector of an optimizer over `shard` (sum of numel floats); returns a vector
// of `total` floats, packed[k] at its parameter offset, zero elsewhere.
std::vector<float> expand_state(const std::vector<optim::Segment>& shard,
                                std::span<const float> packed, std::int64_t total);

// The inverse: the shard's elements of a full state vector, packed back to back.
std::vector<float> pack_state(const std::vector<optim::Segment>& shard,
                              std::span<const float> full);

}  // namespace dtrain::parallel
