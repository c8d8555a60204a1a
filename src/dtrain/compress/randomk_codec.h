// random-k: k elements chosen uniformly at random without replacement (Stich et al. 2018,
// Sparsified SGD with memory; Wangni et al. 2018). The indices are a function of the seed alone,
// so they are not sent: the payload is the k values, and decode draws the same indices again.
//
// The choice made here: every rank encodes a bucket with the same seed (the reducer derives it
// from the step and the bucket, not the rank), so all ranks keep the same indices and their
// payloads add element-wise: random-k is a summable codec, exchanged by one allreduce of k f32
// (2 (P-1)/P x 4k bytes per rank for ring) instead of an allgather of values and indices ((P-1) x
// 8k). The price: the ranks' errors are correlated (they all drop the same elements in a step);
// error feedback, on by default, sends the dropped part in later steps.
//
// Scaled (unbiased) or not: `scaled` multiplies the kept values by n/k, so that
// E_seed[decode(encode(x))] = x; unscaled keeps them as they are, which is a contraction
// (|decode(encode(x)) - x| <= |x|), what error feedback needs (scaled values would make the
// residual grow). codec_spec.h picks unscaled with error feedback, scaled without.
//
// Payload: 4k bytes (f32 values in ascending index order).
//
// Indices: Floyd's algorithm (k draws of Philox, base/rng.h) marks a uniform k-subset in a bitmap
// of n bits, and a scan of the bitmap lists it in ascending order: O(k) draws + n/8 bytes.
// Bound per element: encode reads n/8 B of bitmap twice (clear, scan) and k values; decode writes
// 4 B (zeros) plus the same index work (decode_add: the index work and k read-modify-writes).
#pragma once

#include <vector>

#include "dtrain/compress/codec.h"
#include "dtrain/compress/keep_count.h"

namespace dtrain::compress {

class RandomkCodec final : public Codec {
 public:
  RandomkCodec(KeepCount keep, bool scaled) : keep_(keep), scaled_(scaled) {}
  std::string name() const override { return "randomk:" + keep_.text(); }
  Exchange exchange() const override { return Exchange::kSummable; }
  DType wire_dtype() const override { return DType::kF32; }
  bool scaled() const { return scaled_; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;

  // The k indices of `seed` for n elements, ascending (what encode keeps).
  std::vector<std::int64_t> indices(std::int64_t n, std::uint64_t seed) const;

 private:
  KeepCount keep_;
  bool scaled_;
};

}  // namespace dtrain::compress
