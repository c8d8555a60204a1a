// top-k: the k elements of largest |x|, as values and indices (Aji & Heafield 2017; Lin et al.
// 2018, Deep Gradient Compression; Stich et al. 2018 with error feedback, on by default here).
// Ties in |x| go to the lower index, so the kept set is one function of x. Decode puts the values
// back and zeros the rest. A gather codec: each rank keeps other indices. NaN counts as the
// largest magnitude, so a NaN gradient is sent, not hidden.
//
// Payload: 8k bytes: k values (f32), then their k indices (i32, ascending). n < 2^31.
//
// How the k are found without a sort: a strided sample of 4096 magnitudes gives a threshold that
// about 2k elements (plus a margin) exceed; one pass collects those candidates in index order,
// each with its magnitude's bits as a key (non-negative floats order as their bit patterns); a
// radix selection (three counting passes over the candidates' keys, 11 + 11 + 10 bits) finds the
// k-th largest key and how many of its ties are kept; a pass over the candidates keeps the ones
// above it and its first ties, still in index order. When the sample misleads (fewer than k
// candidates) the pass is redone with every element: slower, never wrong.
//
// Bound per element: encode reads 4 B once (plus O(k) work on about 2k candidates); decode writes
// 4 B (zeros) plus k scattered writes (decode_add: k scattered read-modify-writes only).
#pragma once

#include "dtrain/compress/codec.h"
#include "dtrain/compress/keep_count.h"

namespace dtrain::compress {

class TopkCodec final : public Codec {
 public:
  explicit TopkCodec(KeepCount keep) : keep_(keep) {}
  std::string name() const override { return "topk:" + keep_.text(); }
  Exchange exchange() const override { return Exchange::kGather; }
  DType wire_dtype() const override { return DType::kU8; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;

 private:
  KeepCount keep_;
};

}  // namespace dtrain::compress
