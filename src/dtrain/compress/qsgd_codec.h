// QSGD (Alistarh et al. 2017): stochastic quantization to s levels of the buffer's l2 norm.
// Element i becomes sign(x_i) x norm x l_i / s with l_i = floor(s |x_i| / norm + u_i), u_i uniform
// in [0, 1) from the seed: E[l_i] = s |x_i| / norm, so decode(encode(x)) is unbiased, with
// variance at most (norm / s)^2 / 4 per element. A gather codec: the ranks' norms differ.
//
// "qsgd:b" counts bits on the wire: b in 2..16 bits per element, one of them the sign, so
// s = 2^(b-1) - 1 levels (qsgd:2 is the paper's ternary s = 1: {-norm, 0, +norm}; qsgd:8 is
// GRACE's s = 127 in one byte). One bit per element is the sign codec (sign_codec.h). The dither
// u_i is a hash of (seed, i), so a run is deterministic and the codec is a pure function of
// (x, seed); the reducer gives each rank its own seed (independent dithering).
//
// Payload: 4 + ceil(n b / 8) bytes: the norm (f32), then the b-bit codes (level | sign << (b-1)).
// Every full block of 256 codes is 8 interleaved lanes (lane l: codes l, l + 8, ..., l + 248)
// packed LSB-first into b 32-bit little-endian words each, word w of lane l at word 8 w + l of
// the block's 32 b bytes: so that 8 lanes pack and unpack with one vector instruction per step
// (SIMD-BP128, Lemire & Boytsov 2015). The last n mod 256 codes are a plain LSB-first bit stream.
//
// Bound per element: encode reads 4 B twice (the norm's sum of squares, then the quantization)
// and writes b/8 B; decode reads b/8 B and writes 4 B (decode_add also reads 4 B). Levels, dither
// and packing are vector code (shifts fixed at compile time for each b).
#pragma once

#include "dtrain/compress/codec.h"

namespace dtrain::compress {

class QsgdCodec final : public Codec {
 public:
  // bits: 2..16 per element (InternalError otherwise; parse_codec reports a user's value).
  explicit QsgdCodec(int bits);
  std::string name() const override;
  Exchange exchange() const override { return Exchange::kGather; }
  DType wire_dtype() const override { return DType::kU8; }
  int levels() const { return levels_; }
  std::size_t encoded_bytes(std::int64_t n) const override;
  void encode(const float* x, std::int64_t n, std::uint8_t* out, std::uint64_t seed) const override;
  void decode(const std::uint8_t* in, std::int64_t n, float* out,
              std::uint64_t seed) const override;
  void decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                  std::uint64_t seed) const override;

 private:
  int bits_;    // b, sign included
  int levels_;  // s = 2^(b-1) - 1
};

}  // namespace dtrain::compress
