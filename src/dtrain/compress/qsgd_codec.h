// QSGD (Alistarh et al. 2017): stochastic quantization to s levels of the buffer's l2 norm.
// Element i becomes sign(x_i) x norm x l_i / s with l_i = floor(s |x_i| / norm + u_i), u_i uniform
// in [0, 1) from the seed: E[l_i] = s |x_i| / norm, so decode(encode(x)) is unbiased, with
// variance at most (norm / s)^2 / 4 per element. A gather codec: the ranks' norms differ.
//
// "qsgd:b" counts bits on the wire: b in 2..16 bits per element, one of them the sign, so
// s = 2^(b-1) - 1 levels (qsgd:2 is the paper's ternary s = 1: {-norm, 0, +norm}; qsgd:8 is
// GRACE's s = 127 in one byte). One bit per element is the sign codec (sign_codec.h).
//
// The dither: 32 xorshift32 generators (Marsaglia 2003), seeded from splitmix64(seed + g), two
// sets of 16 lanes: element i takes generator 16 ((i div 16) mod 2) + (i mod 16), its output
// number (i div 32) + 1, and u_i = its top 24 bits x 2^-24. Six one-cycle vector instructions make
// 16 dithers (the hash of (seed, i) it replaced took about ten, two of them multiplies), and the
// two sets are two independent dependency chains. So a run is deterministic and the codec is a
// pure function of (x, seed); the reducer gives each rank its own seed (independent dithering).
//
// Payload: 4 + ceil(n b / 8) bytes: the norm (f32), then the b-bit codes (level | sign << (b-1)).
// Every full block of 512 codes is 16 interleaved lanes (lane l: codes l, l + 16, ..., l + 496)
// packed LSB-first into b 32-bit little-endian words each, word w of lane l at word 16 w + l of
// the block's 64 b bytes: so that 16 lanes pack and unpack with one AVX-512 instruction per step
// (SIMD-BP128's layout, Lemire & Boytsov 2015, at 16 lanes). The last n mod 512 codes are a plain
// LSB-first bit stream. With AVX-512 the quantization and the packing are fused (the codes never
// leave registers), as are the unpacking and the scaling in decode.
//
// Bound per element: encode reads 4 B twice (the norm's sum of squares, then the quantization)
// and writes b/8 B; decode reads b/8 B and writes 4 B (decode_add also reads 4 B): 12 + b/4 B in
// all. Compute per 16 elements: encode about 18 vector instructions (6 for the dither), decode
// about 8.
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
