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
                                     std::uint64_t seed, std::int64_t warmup_steps,
                                     float momentum_correction)
    : GradientReducer(context),
      spec_(spec),
      seed_(seed),
      warmup_steps_(warmup_steps),
      exchanges_(context.buckets.size(), 0),
      collective_(fmt::format("{} {}", spec.text(), compress::exchange_name(spec.exchange()))),
      gather_options_(context.collective),
      codec_(compress::make_codec(spec)),
      momentum_correction_(momentum_correction) {
  DTRAIN_CHECK(spec.kind != compress::CodecKind::kNone, "the compressed reducer needs a codec");
  DTRAIN_CHECK(momentum_correction == 0.0f || spec.error_feedback,
               "momentum correction needs a codec with error feedback (not {})", spec.text());
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
  if (momentum_correction > 0.0f) velocity_.assign(static_cast<std::size_t>(size), 0.0f);
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
    plan_pieces(i, uncompressed);
  }
  if (!uncompressed.empty() && context.comm.rank() == 0) {
    log::info(
        "{}: {} tensor(s) gain nothing from rank {} (vectors, or r (rows + cols) >= rows cols) "
        "and are allreduced exactly beside the factors: {}",
        spec.text(), uncompressed.size(), spec.rank, fmt::join(uncompressed, ", "));
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
  if (!velocity_.empty()) {
    // Momentum correction: u = beta u + g through the codec; factor masking after it.
    float* u = accumulate_velocity(bucket, grads);
    feedback_->encode(*codec_, bucket.offset, u, bucket.count, state.payload.data(), seed,
                      sent_.data());
    for (std::int64_t i = 0; i < bucket.count; ++i) u[i] = sent_[i] != 0.0f ? 0.0f : u[i];
  } else if (feedback_) {
    feedback_->encode(*codec_, bucket.offset, grads, bucket.count, state.payload.data(), seed,
                      sent_.data());
  } else {
    codec_->encode(grads, bucket.count, state.payload.data(), seed);
  }
  return state.steps++;
}

float* CompressedReducer::accumulate_velocity(const GradientBucket& bucket, const float* grads) {
  float* u = velocity_.data() + bucket.offset;
  const float beta = momentum_correction_;
  for (std::int64_t i = 0; i < bucket.count; ++i) u[i] = beta * u[i] + grads[i];
  return u;
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

void CompressedReducer::plan_pieces(std::size_t b, std::vector<std::string>& exact) {
  const GradientBucket& bucket = context_.buckets[b];
  BucketState& state = states_[b];
  const int rank = spec_.rank;
  // A piece pays when its factors are smaller than it and the rank fits the matrix.
  const auto pays = [rank](const compress::LowRankShape& shape) {
    return rank <= std::min(shape.rows, shape.cols) &&
           rank * (shape.rows + shape.cols) < shape.rows * shape.cols;
  };
  std::uint64_t piece_seed = 0;
  const auto add = [&](std::int64_t offset, std::int64_t count, const compress::LowRankShape& shape,
                       bool near_square, const std::string& name) {
    LowRankPiece piece{offset, count, nullptr};
    if (pays(shape) && count > 0) {
      const std::uint64_t seed = codec_seed(seed_, b, 0, -1) + piece_seed++;
      piece.power = near_square ? std::make_unique<compress::PowerSgd>(count, rank, seed)
                                : std::make_unique<compress::PowerSgd>(shape, rank, seed);
    } else {
      exact.push_back(
          fmt::format("{} ({} elements, {} x {})", name, count, shape.rows, shape.cols));
    }
    state.pieces.push_back(std::move(piece));
  };
  if (bucket.first_entry == bucket.end_entry) {
    add(0, bucket.count, compress::LowRankShape::of(bucket.count), true, bucket.name);
  } else {
    const auto& entries = context_.model.store().param_entries();
    for (std::size_t e = bucket.first_entry; e < bucket.end_entry; ++e) {
      const nn::ParamEntry& entry = entries[e];
      const std::int64_t rows = entry.shape.size() >= 2 ? entry.shape[0] : 1;
      add(entry.offset - bucket.offset, entry.numel, {rows, entry.numel / rows}, false, entry.name);
    }
  }
  std::int64_t first = 0, second = 0;
  for (const LowRankPiece& piece : state.pieces) {
    first += piece.power ? piece.power->p_count() : piece.count;
    second += piece.power ? piece.power->q_count() : 0;
  }
  state.first.resize(static_cast<std::size_t>(first));
  state.second.resize(static_cast<std::size_t>(second));
}

void CompressedReducer::reduce_powersgd(std::size_t b, const GradientBucket& bucket, float* grads) {
  comm::Communicator& comm = context_.comm;
  BucketState& state = states_[b];
  // Momentum correction: the velocity u = beta u + g goes through error feedback and the factors.
  float* velocity = velocity_.empty() ? nullptr : accumulate_velocity(bucket, grads);
  const float* input = velocity != nullptr ? velocity : grads;
  const float* matrix =
      feedback_ ? feedback_->compensate(bucket.offset, input, bucket.count) : input;
  // First allreduce: every matrix's P = M Q and the exact elements.
  float* at = state.first.data();
  for (LowRankPiece& piece : state.pieces) {
    if (piece.power) {
      piece.power->compute_p(matrix + piece.offset);
      at = std::copy_n(piece.power->p(), piece.power->p_count(), at);
    } else {
      at = std::copy_n(matrix + piece.offset, piece.count, at);
    }
  }
  comm.allreduce(state.first.data(), std::ssize(state.first), DType::kF32, comm::ReduceOp::kSum,
                 context_.collective);
  // Orthogonalize, Q = M^T P; the exact elements are final; error feedback keeps what this rank's
  // own P^ Q^T leaves out (the exact elements leave nothing). Momentum correction's factor masking,
  // in a low-rank piece's terms: the velocity's part in the span of P^ (what this step sends)
  // restarts at 0, u -= P^ P^T u; a piece sent exactly restarts whole, as top-k's sent elements.
  const float* from = state.first.data();
  float* q_at = state.second.data();
  for (LowRankPiece& piece : state.pieces) {
    if (piece.power) {
      std::copy_n(from, piece.power->p_count(), piece.power->p());
      from += piece.power->p_count();
      piece.power->orthogonalize();
      piece.power->compute_q();
      if (feedback_) piece.power->decode(sent_.data() + piece.offset);
      if (velocity != nullptr) piece.power->project_out(velocity + piece.offset);
      q_at = std::copy_n(piece.power->q(), piece.power->q_count(), q_at);
    } else {
      if (feedback_) std::copy_n(matrix + piece.offset, piece.count, sent_.data() + piece.offset);
      if (velocity != nullptr) std::fill_n(velocity + piece.offset, piece.count, 0.0f);
      std::copy_n(from, piece.count, grads + piece.offset);
      from += piece.count;
    }
  }
  if (feedback_) feedback_->settle(bucket.offset, sent_.data(), bucket.count);
  // Second allreduce: every Q; then each matrix is P^ (sum Q)^T.
  if (!state.second.empty()) {
    comm.allreduce(state.second.data(), std::ssize(state.second), DType::kF32, comm::ReduceOp::kSum,
                   context_.collective);
  }
  const float* q_from = state.second.data();
  for (LowRankPiece& piece : state.pieces) {
    if (!piece.power) continue;
    std::copy_n(q_from, piece.power->q_count(), piece.power->q());
    q_from += piece.power->q_count();
    piece.power->decode(grads + piece.offset);
  }
  ++state.steps;
}

void CompressedReducer::reduce(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  if (exchanges_[b]++ < warmup_steps_) {
    if (!velocity_.empty()) {
      const float* u = accumulate_velocity(bucket, grads);
      std::copy_n(u, bucket.count, grads);
    }
    context_.comm.allreduce(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                            context_.collective);
    return;
  }
  if (!codec_) return reduce_powersgd(b, bucket, grads);
  const std::int64_t step = encode(b, bucket, grads);
  exchange(b, /*async=*/false);
  decode(b, bucket, grads, step);
}

comm::Work CompressedReducer::reduce_async(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  if (exchanges_[b]++ < warmup_steps_) {
    if (!velocity_.empty()) {
      const float* u = accumulate_velocity(bucket, grads);
      std::copy_n(u, bucket.count, grads);
    }
    return context_.comm.allreduce_async(grads, bucket.count, DType::kF32, comm::ReduceOp::kSum,
                                         context_.collective);
  }
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

std::vector<optim::StateTensor> CompressedReducer::state() const {
  std::vector<optim::StateTensor> out;
  if (feedback_) {
    const auto residual = feedback_->residual();
    out.push_back({"compression/residual", {residual.begin(), residual.end()}});
  }
  // Counts as floats: exact below 2^24 exchanges.
  std::vector<float> exchanges;
  for (const std::int64_t count : exchanges_) {
    DTRAIN_CHECK_LT(count, std::int64_t{1} << 24);
    exchanges.push_back(static_cast<float>(count));
  }
  out.push_back({"compression/exchanges", std::move(exchanges)});
  if (!velocity_.empty()) out.push_back({"compression/velocity", velocity_});
  if (!codec_) {
    std::vector<float> q;
    for (const BucketState& state : states_) {
      for (const LowRankPiece& piece : state.pieces) {
        if (piece.power)
          q.insert(q.end(), piece.power->q(), piece.power->q() + piece.power->q_count());
      }
    }
    out.push_back({"compression/powersgd_q", std::move(q)});
  }
  return out;
}

void CompressedReducer::load_state(const std::vector<optim::StateTensor>& state,
                                   const std::string& path) {
  const std::vector<optim::StateTensor> expected = this->state();
  for (const optim::StateTensor& want : expected) {
    const auto found = std::find_if(state.begin(), state.end(), [&](const optim::StateTensor& t) {
      return t.name == want.name;
    });
    if (found == state.end() || found->values.size() != want.values.size()) {
      throw CheckpointError(
          fmt::format("checkpoint {}: {} {} for {} ({} floats expected): it was written by another "
                      "compression setting; resume it with the run's own resolved.toml",
                      path, want.name, found == state.end() ? "is missing" : "has another size",
                      spec_.text(), want.values.size()));
    }
    if (want.name == "compression/residual") {
      feedback_->set_residual(found->values);
    } else if (want.name == "compression/velocity") {
      velocity_ = found->values;
    } else if (want.name == "compression/exchanges") {
      for (std::size_t b = 0; b < exchanges_.size(); ++b) {
        exchanges_[b] = static_cast<std::int64_t>(found->values[b]);
        states_[b].steps = std::max<std::int64_t>(0, exchanges_[b] - warmup_steps_);
      }
    } else {
      const float* from = found->values.data();
      for (BucketState& bucket : states_) {
        for (LowRankPiece& piece : bucket.pieces) {
          if (!piece.power) continue;
          std::copy_n(from, piece.power->q_count(), piece.power->q());
          from += piece.power->q_count();
        }
      }
    }
  }
}

ReducerFactory compressed_reducer(const compress::CodecSpec& spec, std::uint64_t seed,
                                  std::int64_t warmup_steps, float momentum_correction) {
  if (spec.kind == compress::CodecKind::kNone) return allreduce_reducer();
  return [spec, seed, warmup_steps, momentum_correction](const ReducerContext& context) {
    return std::make_unique<CompressedReducer>(context, spec, seed, warmup_steps,
                                               momentum_correction);
  };
}

}  // namespace dtrain::parallel
