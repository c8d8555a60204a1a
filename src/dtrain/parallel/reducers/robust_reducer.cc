#include "dtrain/parallel/reducers/robust_reducer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <utility>

#include "dtrain/aggregate/aggregator_spec.h"
#include "dtrain/base/error.h"

namespace dtrain::parallel {

bool needs_robust_reducer(const std::string& aggregator, const std::string& attack) {
  // Label flipping changes the attackers' data, not what they send: the mean of its gradients is
  // the plain allreduce's.
  return aggregator != "mean" || (attack != "none" && attack != "labelflip");
}

RobustReducer::RobustReducer(const ReducerContext& context, const RobustOptions& options)
    : GradientReducer(context), options_(options), gather_options_(context.collective) {
  const int ranks = context.comm.size();
  const int f = options.byzantine;
  if (f < 0 || f >= ranks) {
    throw ConfigError(fmt::format(
        "byzantine = {} attacking ranks needs 0 <= f < P = {} ranks (at least one honest rank)", f,
        ranks));
  }
  const bool gradient_attack = options.attack != "none" && options.attack != "labelflip";
  if (gradient_attack) {
    if (f == 0) {
      throw ConfigError(
          fmt::format("attack '{}' needs byzantine >= 1 attacking ranks (the last f ranks), got 0",
                      options.attack));
    }
    attack_ = aggregate::parse_attack(options.attack, options.seed);
    // ALIE's z formula needs 1 <= f <= floor(P/2): fail here, not at the first step.
    if (attack_->name() == "alie") aggregate::alie_z(ranks, f);
  }
  gather_options_.algorithm.clear();
  states_.resize(context.buckets.size());
  for (std::size_t b = 0; b < states_.size(); ++b) {
    BucketState& state = states_[b];
    state.gathered.resize(static_cast<std::size_t>(context.buckets[b].count) *
                          static_cast<std::size_t>(ranks));
    if (options.worker_momentum > 0.0f) {
      state.momentum.assign(static_cast<std::size_t>(context.buckets[b].count), 0.0f);
    }
    state.aggregator = aggregate::parse_aggregator(options.aggregator, f, options.seed);
    state.aggregator->check_inputs(ranks);
  }
  collective_ = states_.empty() ? options.aggregator : states_.front().aggregator->name();
  collective_ += " allgather";
  if (attack_) collective_ += fmt::format(" + {} on {} rank(s)", attack_->name(), f);
  if (options.worker_momentum > 0.0f) {
    collective_ += fmt::format(" of worker momenta (beta {:g})", options.worker_momentum);
  }
}

RobustReducer::~RobustReducer() = default;

std::size_t RobustReducer::index_of(const GradientBucket& bucket) const {
  const auto index = static_cast<std::size_t>(&bucket - context_.buckets.data());
  DTRAIN_CHECK_LT(index, context_.buckets.size());
  return index;
}

void RobustReducer::scale(const GradientBucket& bucket, float* grads) {
  const auto p = static_cast<float>(context_.comm.size());
  for (std::int64_t i = 0; i < bucket.count; ++i) grads[i] *= p;
  std::vector<float>& momentum = states_[index_of(bucket)].momentum;
  if (momentum.empty()) return;
  const float beta = options_.worker_momentum;
  for (std::int64_t i = 0; i < bucket.count; ++i) {
    momentum[static_cast<std::size_t>(i)] = beta * momentum[static_cast<std::size_t>(i)] + grads[i];
    grads[i] = momentum[static_cast<std::size_t>(i)];
  }
}

std::vector<float> RobustReducer::momentum() const {
  std::vector<float> values;
  for (const BucketState& state : states_) {
    values.insert(values.end(), state.momentum.begin(), state.momentum.end());
  }
  return values;
}

void RobustReducer::load_momentum(const std::vector<float>& values) {
  std::size_t at = 0;
  for (BucketState& state : states_) {
    if (at + state.momentum.size() > values.size()) break;
    std::copy_n(values.begin() + static_cast<std::ptrdiff_t>(at), state.momentum.size(),
                state.momentum.begin());
    at += state.momentum.size();
  }
  if (at != values.size() || momentum().size() != values.size()) {
    throw InternalError(fmt::format("RobustReducer::load_momentum: {} values for {} momenta",
                                    values.size(), momentum().size()));
  }
}

namespace {

void put_double(std::vector<float>& out, double value) {
  float halves[2];
  static_assert(sizeof halves == sizeof value);
  std::memcpy(halves, &value, sizeof value);
  out.push_back(halves[0]);
  out.push_back(halves[1]);
}

double get_double(std::span<const float> values, std::size_t& at) {
  double value = 0.0;
  std::memcpy(&value, values.data() + at, sizeof value);
  at += 2;
  return value;
}

}  // namespace

std::vector<float> RobustReducer::aggregator_state() const {
  std::vector<float> out;
  put_double(out, static_cast<double>(states_.size()));
  for (const BucketState& state : states_) {
    const std::vector<double> kept = state.aggregator->state();
    put_double(out, static_cast<double>(state.steps));
    put_double(out, static_cast<double>(kept.size()));
    for (double value : kept) put_double(out, value);
  }
  return out;
}

bool RobustReducer::load_aggregator_state(std::span<const float> values) {
  if (values.size() % 2 != 0 || values.size() < 2) return false;
  std::size_t at = 0;
  if (get_double(values, at) != static_cast<double>(states_.size())) return false;
  std::vector<std::pair<std::int64_t, std::vector<double>>> loaded;
  for (std::size_t b = 0; b < states_.size(); ++b) {
    if (at + 4 > values.size()) return false;
    const auto steps = static_cast<std::int64_t>(get_double(values, at));
    const auto count = static_cast<std::size_t>(get_double(values, at));
    if (at + 2 * count > values.size()) return false;
    std::vector<double> kept(count);
    for (double& value : kept) value = get_double(values, at);
    loaded.emplace_back(steps, std::move(kept));
  }
  if (at != values.size()) return false;
  for (std::size_t b = 0; b < states_.size(); ++b) {
    if (!states_[b].aggregator->state_fits(loaded[b].second, context_.buckets[b].count)) {
      return false;
    }
  }
  for (std::size_t b = 0; b < states_.size(); ++b) {
    states_[b].steps = loaded[b].first;
    states_[b].aggregator->load_state(loaded[b].second);
  }
  return true;
}

void RobustReducer::combine(std::size_t b, const GradientBucket& bucket, float* grads) {
  BucketState& state = states_[b];
  const int ranks = context_.comm.size();
  const std::int64_t n = bucket.count;
  float* rows = state.gathered.data();
  const auto row = [&](int r) { return rows + static_cast<std::int64_t>(r) * n; };
  if (attack_) {
    const int f = options_.byzantine;
    const int honest_count = ranks - f;
    std::vector<const float*> honest;
    for (int r = 0; r < honest_count; ++r) honest.push_back(row(r));
    aggregate::AttackInput input;
    input.honest = honest;
    input.workers = ranks;
    input.byzantine = f;
    input.step = static_cast<std::uint64_t>(state.steps);
    for (int r = honest_count; r < ranks; ++r) {
      if (attack_->needs_honest() && r > honest_count) {
        // ALIE and IPM depend on the honest rows only: every attacker sends the same row.
        std::copy_n(row(honest_count), n, row(r));
        continue;
      }
      input.own = row(r);
      input.rank = r;
      attack_->apply(input, n, row(r));
    }
  }
  state.aggregator->aggregate(rows, ranks, n, grads);
  ++state.steps;
}

void RobustReducer::reduce(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  scale(bucket, grads);
  context_.comm.allgather(grads, states_[b].gathered.data(), bucket.count, DType::kF32,
                          gather_options_);
  combine(b, bucket, grads);
}

comm::Work RobustReducer::reduce_async(const GradientBucket& bucket, float* grads) {
  const std::size_t b = index_of(bucket);
  scale(bucket, grads);
  comm::Work exchanged = context_.comm.allgather_async(grads, states_[b].gathered.data(),
                                                       bucket.count, DType::kF32, gather_options_);
  comm::Work done(fmt::format("rank {}: {} of bucket {}", context_.comm.rank(), collective_, b));
  // The collective's own deadline ends it first; the wait only bounds a lost Work.
  const auto timeout = context_.comm.options().timeout * 2;
  combiner_.push([this, b, &bucket, grads, exchanged, done, timeout] {
    try {
      exchanged.wait(timeout);
      combine(b, bucket, grads);
      done.finish(nullptr);
    } catch (...) {
      done.finish(std::current_exception());
    }
  });
  return done;
}

ReducerFactory robust_reducer(const RobustOptions& options) {
  return [options](const ReducerContext& context) {
    return std::make_unique<RobustReducer>(context, options);
  };
}

}  // namespace dtrain::parallel
