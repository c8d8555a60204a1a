#include "dtrain/parallel/reducers/compressed_reducer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/base/log.h"
#include "dtrain/base/rng.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"

namespace dtrain::parallel {

std::uint64_t codec_seed(std::uint64_t seed, std::size_t bucket, std::int64_t step, int rank) {
  const std::uint64_t shared = rng_stream(seed, bucket, static_cast<std::uint64_t>(step));
  return rank < 0 ? shared : rng_stream(shared, static_cast<std::uint64_t>(rank) + 1);
}

CompressedReducer::CompressedReducer(const ReducerContext& context, const compress::CodecSpec& spec,
                                     std::uint64_t seed)
    : GradientReducer(context),
      spec_(spec),
      seed_(seed),
      collective_(fmt::format("{} {}", spec.text(), compress::exchange_name(spec.exchange()))),
      gather_options_(context.collective),
      codec_(compress::make_codec(spec)) {
  DTRAIN_CHECK(spec.kind != compress::CodecKind::kNone, "the compressed reducer needs a codec");
  gather_options_.algorithm.clear();
  std::int64_t size = 0, largest = 0;
  for (const GradientBucket& b : context.buckets) {
    size = std::max(size, b.offset + b.count);
    largest = std::max(largest, b.count);
  }
  if (spec.error_feedback) {
    feedback_.emplace(size);
    sent_.resize(static_cast<std::size_t>(largest));
  }
  const int ranks = context.comm.size();
  states_.resize(context.buckets.size());
  std::vector<std::string> uncompressed;
  for (std::size_t i = 0; i < states_.size(); ++i) {
    const GradientBucket& b = context.buckets[i];
    BucketState& state = states_[i];
    if (codec_) {
      state.payload.resize(codec_->encoded_bytes(b.count));
      if (codec_->exchange() == compress::Exchange::kGather) {
        state.gathered.resize(state.payload.size() * static_cast<std::size_t>(ranks));
      }
      continue;
    }
    const compress::LowRankShape shape = compress::LowRankShape::of(b.count);
    if (spec.rank <= std::min(shape.rows, shape.cols) &&
        spec.rank * (shape.rows + shape.cols) < b.count) {
      state.powersgd =
          std::make_unique<compress::PowerSgd>(b.count, spec.rank, codec_seed(seed, i, 0, -1));
    } else {
      uncompressed.push_back(
          fmt::format("{} ({} elements, {} x {})", b.name, b.count, shape.rows, shape.cols));
    }
  }
  if (!uncompressed.empty() && context.comm.rank() == 0) {
    log::info(
        "{}: {} of {} buckets gain nothing from rank {} (r (rows + cols) >= n) and are "
        "allreduced in f32: {}",
        spec.text(), uncompressed.size(), states_.size(), spec.rank, fmt::join(uncompressed, ", "));
  }
}

CompressedReducer::~CompressedReducer() = default;

std::string CompressedReducer::algorithm() const {
  if (codec_ && codec_->exchange() == compress::Exchange::kGather) return "ring";
  return context_.collective.algorithm.empty() ? context_.comm.options().allreduce_algorithm
                                               : context_.collective.algorithm;
}

std::size_t CompressedReducer::index_of(const GradientBucket& bucket) const {
  const auto index = static_cast<std::size_t>(&bucket - context_.buckets.data());
  DTRAIN_CHECK_LT(index, context_.buckets.size());
  return index;
}

std::int64_t CompressedReducer::encode(std::size_t b, const GradientBucket& bucket,
                                       const float* grads) {
  BucketState& state = states_[b];
  const bool gather = codec_->exchange() == compress::Exchange::kGather;
  const std::uint64_t seed = codec_seed(seed_, b, state.steps, gather ? context_.comm.rank() : -1);
  if (feedback_) {
    feedback_->encode(*codec_, bucket.offset, grads, bucket.count, state.payload.data(), seed,
                      sent_.data());
  } else {
    codec_->encode(grads, bucket.count, state.payload.data(), seed);
  }
  return state.steps++;
}

comm::Work CompressedReducer::exchange(std::size_t b, bool async) {
  BucketState& state = states_[b];
  comm::Communicator& comm = context_.comm;
  const std::int64_t count = codec_->wire_count(context_.buckets[b].count);
  if (codec_->exchange() == compress::Exchange::kGather) {
    if (async) {
      return comm.allgather_async(state.payload.data(), state.gathered.data(), count, DType::kU8,
                                  gather_options_);
    }
    comm.allgather(state.payload.data(), state.gathered.data(), count, DType::kU8, gather_options_);
  } else {
    if (async) {
      return comm.allreduce_async(state.payload.data(), count, codec_->wire_dtype(),
                                  comm::ReduceOp::kSum, context_.collective);
    }
    comm.allreduce(state.payload.data(), count, codec_->wire_dtype(), comm::ReduceOp::kSum,
                   context_.collective);
  }
  comm::Work done("blocking exchange");
  done.finish(nullptr);
  return done;
}

void CompressedReducer::decode(std::size_t b, const GradientBucket& bucket, float* grads,
                               std::int64_t step) {
  const BucketState& state = states_[b];
  if (codec_->exchange() == compress::Exchange::kSummable) {
    codec_->decode(state.payload.data(), bucket.count, grads, codec_seed(seed_, b, step, -1));
    return;
  }
  std::fill(grads, grads + bucket.count, 0.0f);
  const std::size_t size = state.payload.size();
  for (int r = 0; r < context_.comm.size(); ++r) {
    codec_->decode_add(state.gathered.data() + static_cast<std::size_t>(r) * size, bucket.count,
                       grads, codec_seed(seed_, b, step, r));
  }
}

void CompressedReducer::reduce_powersgd(std::size_t b, const GradientBucket& bucket, float* grads) {
  comm::Communicator& comm = context_.comm;
  compress::PowerSgd* power = states_[b].powersgd.get();
  if (power == nullptr) {  // too small to gain: the plain sum, exact
    comm.allreduce(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum, context_.collective);
    return;
  }
  const float* matrix =
      feedback_ ? feedback_->compensate(bucket.offset, grads, bucket.count) : grads;
  power->compute_p(matrix);
  comm.allreduce(power->p(), power->p_count(), DType::kF32, comm::ReduceOp::kSum,
                 context_.collective);
  power->orthogonalize();
  power->compute_q();
  if (feedback_) {  // the residual is what this rank's own P^ Q^T leaves out
    power->decode(sent_.data());
    feedback_->settle(bucket.offset, sent_.data(), bucket.count);
  }
  comm.allreduce(power->q(), power->q_count(), DType::kF32, comm::ReduceOp::kSum,
                 context_.collective);
  power->decode(grads);
  ++states_[b].steps;
}

void CompressedReducer::reduce(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  if (!codec_) return reduce_powersgd(b, bucket, grads);
  const std::int64_t step = encode(b, bucket, grads);
  exchange(b, /*async=*/false);
  decode(b, bucket, grads, step);
}

comm::Work CompressedReducer::reduce_async(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  comm::Work done(fmt::format("rank {}: {} of bucket {}", context_.comm.rank(), collective_, b));
  if (!codec_) {
    try {
      reduce_powersgd(b, bucket, grads);
      done.finish(nullptr);
    } catch (...) {
      done.finish(std::current_exception());
    }
    return done;
  }
  const std::int64_t step = encode(b, bucket, grads);
  comm::Work exchanged = exchange(b, /*async=*/true);
  // The collective's own deadline ends it first; the wait only bounds a lost Work.
  const auto timeout = context_.comm.options().timeout * 2;
  decoder_.push([this, b, &bucket, grads, step, exchanged, done, timeout] {
    try {
      exchanged.wait(timeout);
      decode(b, bucket, grads, step);
      done.finish(nullptr);
    } catch (...) {
      done.finish(std::current_exception());
    }
  });
  return done;
}

ReducerFactory compressed_reducer(const compress::CodecSpec& spec, std::uint64_t seed) {
  if (spec.kind == compress::CodecKind::kNone) return allreduce_reducer();
  return [spec, seed](const ReducerContext& context) {
    return std::make_unique<CompressedReducer>(context, spec, seed);
  };
}

}  // namespace dtrain::parallel
