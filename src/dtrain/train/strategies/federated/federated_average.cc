#include "dtrain/train/strategies/federated/federated_average.h"

#include <algorithm>
#include <iterator>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

// The counters in the order they ride behind the model in the allreduce.
constexpr double RoundCounts::*kCounterFields[] = {
    &RoundCounts::completed, &RoundCounts::failed,  &RoundCounts::samples, &RoundCounts::seen,
    &RoundCounts::loss_sum,  &RoundCounts::correct, &RoundCounts::steps,   &RoundCounts::stop};
constexpr auto kCounters = static_cast<std::int64_t>(std::size(kCounterFields));

}  // namespace

FederatedAverage::FederatedAverage(std::int64_t params, std::int64_t buffers)
    : params_(params),
      buffers_(buffers),
      sums_(static_cast<std::size_t>(params + buffers + kCounters)) {}

void FederatedAverage::reset() {
  std::fill(sums_.begin(), sums_.end(), 0.0);
  counts_ = RoundCounts{};
}

void FederatedAverage::add(std::int64_t samples, std::span<const float> params,
                           std::span<const float> buffers) {
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(params.size()), params_);
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(buffers.size()), buffers_);
  const auto weight = static_cast<double>(samples);
  double* sums = sums_.data();
  for (std::int64_t i = 0; i < params_; ++i)
    sums[i] += weight * static_cast<double>(params[static_cast<std::size_t>(i)]);
  for (std::int64_t i = 0; i < buffers_; ++i) {
    sums[params_ + i] += weight * static_cast<double>(buffers[static_cast<std::size_t>(i)]);
  }
}

void FederatedAverage::allreduce(comm::Communicator* comm) {
  if (comm == nullptr) return;
  double* tail = sums_.data() + params_ + buffers_;
  for (std::int64_t i = 0; i < kCounters; ++i) tail[i] = counts_.*kCounterFields[i];
  comm->allreduce(sums_.data(), static_cast<std::int64_t>(sums_.size()), DType::kF64,
                  comm::ReduceOp::kSum);
  for (std::int64_t i = 0; i < kCounters; ++i) counts_.*kCounterFields[i] = tail[i];
}

bool FederatedAverage::average_into(std::span<float> params, std::span<float> buffers) const {
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(params.size()), params_);
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(buffers.size()), buffers_);
  if (counts_.samples <= 0.0) return false;
  const double total = counts_.samples;
  for (std::int64_t i = 0; i < params_; ++i) {
    params[static_cast<std::size_t>(i)] =
        static_cast<float>(sums_[static_cast<std::size_t>(i)] / total);
  }
  for (std::int64_t i = 0; i < buffers_; ++i) {
    buffers[static_cast<std::size_t>(i)] =
        static_cast<float>(sums_[static_cast<std::size_t>(params_ + i)] / total);
  }
  return true;
}

}  // namespace dtrain::train
