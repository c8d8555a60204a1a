// fp16: each float rounded to IEEE binary16 (round to nearest even; base/half.h), as Horovod's
// fp16 compression and PyTorch DDP's fp16_compress_hook do. Summable: the payloads are
// allreduced as DType::kF16 (each partial sum rounded to f16 again) and decoded once.
//
// Payload: 2n bytes. Error: |decode(encode(x)) - x| <= 2^-11 |x| for |x| in the normal range
// [2^-14, 65504]; below it the absolute error is at most 2^-25 (half the subnormal step); above
// 65504 (exactly: from 65520) x becomes infinity. Lossless for values that are f16 numbers.
//
// Bound per element: encode reads 4 B and writes 2 B; decode reads 2 B and writes 4 B (decode_add
// also reads 4 B). One pass each, with the CPU's F16C conversions (8 lanes) where the build
// targets them, else the scalar conversions of base/half.h, which agree bit for bit except in
// NaN payloads.
#pragma once

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class Fp16Codec final : public Codec {
 public:
  std::string name() const override { return "fp16"; }
  Exchange exchange() const override { return Exchange::kSummable; }
  DType wire_dtype() const override { return DType::kF16; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;
};

}  // namespace dtrain::compress
