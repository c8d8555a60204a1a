// Error feedback (GRACE's Memory; Seide et al. 2014, Stich et al. 2018, Karimireddy et al. 2019):
// what a lossy codec did not send this step is added to the next step's gradient, so that over
// steps everything is sent. For one buffer range:
//
//   compensated = grad + residual
//   sent        = decode(encode(compensated))
//   residual    = compensated - sent        (so sent + residual = grad + old residual)
//
// The residual is one flat buffer with the gradient's layout (a bucket is an [offset, offset + n)
// range of it, as of the gradient buffer), zero at the start. compensate() writes the compensated
// values into the residual range itself, and settle() turns them into the new residual: no second
// buffer, two passes of 4 B per element read and written beside the codec's own.
//
// A bucket's exchange uses a range between compensate() and settle(), on one thread; different
// ranges may be used on different threads.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class ErrorFeedback {
 public:
  // A residual of `size` elements, all zero.
  explicit ErrorFeedback(std::int64_t size);

  std::span<const float> residual() const { return residual_; }
  // A saved residual back (a checkpoint's): values.size() must be the residual's size.
  void set_residual(std::span<const float> values);

  // residual[offset, offset + n) += grad[0, n): the compensated values, returned in place.
  float* compensate(std::int64_t offset, const float* grad, std::int64_t n);
  // residual[offset, offset + n) -= sent[0, n), after compensate(): the new residual.
  void settle(std::int64_t offset, const float* sent, std::int64_t n);

  // The three steps with a codec: out = encode(grad + residual), residual = compensated -
  // decode(out). `scratch` (n floats) holds decode(out).
  void encode(const Codec& codec, std::int64_t offset, const float* grad, std::int64_t n,
              std::uint8_t* out, std::uint64_t seed, float* scratch);

 private:
  std::vector<float> residual_;
};

}  // namespace dtrain::compress
