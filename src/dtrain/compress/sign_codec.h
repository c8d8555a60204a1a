// sign: one bit per element and one scale, the mean |x| (1-bit SGD, Seide et al. 2014; signSGD
// with a scale as EF-SGD, Karimireddy et al. 2019, uses it): decode(encode(x))_i = +-mean|x|, the
// sign of x_i. The scale makes the l1 norm survive: sum_i |decode_i| = sum_i |x_i|. Zero and -0.0
// become +scale and -scale (the sign bit is the float's). A gather codec: ranks' scales differ.
// Error feedback is on by default (codec_spec.h): without it sign is biased and loses whatever
// the sign does not say.
//
// Payload: 4 + ceil(n / 8) bytes: the scale (f32), then bit i of byte i / 8 is x_i's sign bit.
//
// Bound per element: encode reads 4 B (in L1-sized blocks: the sum of |x|, then the sign bits)
// and writes 1/8 B; decode reads 1/8 B and writes 4 B (decode_add also reads 4 B).
#pragma once

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class SignCodec final : public Codec {
 public:
  std::string name() const override { return "sign"; }
  Exchange exchange() const override { return Exchange::kGather; }
  DType wire_dtype() const override { return DType::kU8; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;
};

}  // namespace dtrain::compress
