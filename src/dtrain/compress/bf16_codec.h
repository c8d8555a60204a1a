// bf16: each float's top 16 bits, the dropped 16 rounded to nearest even (base/half.h), as
// Horovod and PyTorch DDP's bf16_compress_hook do. Summable: the payloads are allreduced as
// DType::kBF16 and decoded once. bf16 keeps float's exponent range, so nothing overflows that did
// not in f32; it keeps 8 significant bits.
//
// Payload: 2n bytes. Error: |decode(encode(x)) - x| <= 2^-8 |x| for normal x (a float within
// half an ulp of FLT_MAX rounds to infinity). Lossless for floats whose low 16 bits are zero.
//
// Bound per element: encode reads 4 B and writes 2 B; decode reads 2 B and writes 4 B (decode_add
// also reads 4 B). One branch-free pass each, which the compiler vectorizes.
#pragma once

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class Bf16Codec final : public Codec {
 public:
  std::string name() const override { return "bf16"; }
  Exchange exchange() const override { return Exchange::kSummable; }
  DType wire_dtype() const override { return DType::kBF16; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;
};

}  // namespace dtrain::compress
