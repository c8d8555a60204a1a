#include "dtrain/compress/error_feedback.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::compress {

ErrorFeedback::ErrorFeedback(std::int64_t size) : residual_(static_cast<std::size_t>(size), 0.0f) {}

void ErrorFeedback::set_residual(std::span<const float> values) {
  DTRAIN_CHECK_EQ(values.size(), residual_.size());
  std::copy(values.begin(), values.end(), residual_.begin());
}

float* ErrorFeedback::compensate(std::int64_t offset, const float* grad, std::int64_t n) {
  DTRAIN_CHECK(offset >= 0 && n >= 0 && offset + n <= static_cast<std::int64_t>(residual_.size()),
               "range [{}, {}) outside the residual of {} elements", offset, offset + n,
               residual_.size());
  float* range = residual_.data() + offset;
  for (std::int64_t i = 0; i < n; ++i) range[i] += grad[i];
  return range;
}

void ErrorFeedback::settle(std::int64_t offset, const float* sent, std::int64_t n) {
  float* range = residual_.data() + offset;
  for (std::int64_t i = 0; i < n; ++i) range[i] -= sent[i];
}

void ErrorFeedback::encode(const Codec& codec, std::int64_t offset, const float* grad,
                           std::int64_t n, std::uint8_t* out, std::uint64_t seed, float* scratch) {
  const float* compensated = compensate(offset, grad, n);
  codec.encode(compensated, n, out, seed);
  codec.decode(out, n, scratch, seed);
  settle(offset, scratch, n);
}

}  // namespace dtrain::compress
