#include "dtrain/aggregate/bucketing.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include "dtrain/aggregate/mean.h"
#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"

namespace dtrain::aggregate {
namespace {

// rng_stream purpose of the bucket shuffles.
constexpr std::uint64_t kShufflePurpose = 0xB0C7;

}  // namespace

Bucketing::Bucketing(int bucket_size, std::unique_ptr<Aggregator> inner, std::uint64_t seed)
    : bucket_size_(bucket_size), inner_(std::move(inner)), seed_(seed) {
  DTRAIN_CHECK(bucket_size >= 1 && inner_ != nullptr, "bucketing with s = {}", bucket_size);
}

std::string Bucketing::name() const {
  return fmt::format("bucket:{},{}", bucket_size_, inner_->name());
}

std::vector<double> Bucketing::state() const {
  std::vector<double> values = {static_cast<double>(calls_)};  // exact below 2^53 calls
  const std::vector<double> inner = inner_->state();
  values.insert(values.end(), inner.begin(), inner.end());
  return values;
}

void Bucketing::load_state(std::span<const double> values) {
  DTRAIN_CHECK(!values.empty(), "{}: a state without its call count", name());
  calls_ = static_cast<std::uint64_t>(values[0]);
  inner_->load_state(values.subspan(1));
}

void Bucketing::check_inputs(int n) const {
  Aggregator::check_inputs(n);
  try {
    inner_->check_inputs(buckets(n));
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("bucket:{} makes {} buckets of {} inputs: {}", bucket_size_,
                                  buckets(n), n, e.what()));
  }
}

void Bucketing::run(Inputs inputs, std::int64_t d, float* out) {
  const int n = static_cast<int>(inputs.size());
  const int count = buckets(n);
  // Fisher-Yates over the indices with this call's own stream.
  order_.resize(static_cast<std::size_t>(n));
  std::iota(order_.begin(), order_.end(), 0);
  Rng rng(seed_, rng_stream(kShufflePurpose, calls_++));
  for (int i = n - 1; i > 0; --i) {
    const auto j = static_cast<int>(rng.below(static_cast<std::uint64_t>(i) + 1));
    std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
  }
  means_.resize(static_cast<std::size_t>(count) * static_cast<std::size_t>(d));
  bucket_pointers_.clear();
  for (int b = 0; b < count; ++b) {
    members_.clear();
    for (int i = b * bucket_size_; i < std::min(n, (b + 1) * bucket_size_); ++i) {
      members_.push_back(inputs[static_cast<std::size_t>(order_[static_cast<std::size_t>(i)])]);
    }
    float* mean = means_.data() + static_cast<std::size_t>(b) * static_cast<std::size_t>(d);
    average_into(members_, d, mean, sum_);
    bucket_pointers_.push_back(mean);
  }
  inner_->aggregate(bucket_pointers_, d, out);
}

}  // namespace dtrain::aggregate
