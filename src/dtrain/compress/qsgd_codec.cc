#include "dtrain/compress/qsgd_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dtrain/base/error.h"
#include "dtrain/compress/sums.h"

#if defined(__AVX512F__)
// GCC 12 takes the intrinsics' _mm512_undefined_*() pass-through operands for uninitialized
// reads once they are inlined (a false positive in its own header).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#endif

namespace dtrain::compress {
namespace {

constexpr std::size_t kNormBytes = 4;

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream (docs in qsgd_codec.h): full blocks of kBlock = 512 codes as 16 interleaved lanes,
// lane l holding codes l, l + 16, ..., l + 496 packed LSB-first into W 32-bit words, word w of
// lane l at word 16 w + l of the block (W x 64 bytes: exactly 512 W bits). The lanes are
// independent, so every step below is one AVX-512 instruction over 16 lanes; the shifts and the
// word boundaries depend only on (v, W), constants once the loop over v is unrolled.
constexpr int kLanes = 16;
constexpr std::int64_t kBlock = 512;
constexpr std::int64_t kBlockBytesPerBit = kBlock / 8;  // a block of W-bit codes: W x 64 bytes

template <int W>
void pack_block(const std::uint32_t* codes, std::uint8_t* out) {
  std::uint32_t words[W * kLanes];
  std::uint32_t acc[kLanes] = {};
  int used = 0;  // bits of the current word filled
  int word = 0;
#pragma GCC unroll 32
  for (int v = 0; v < kBlock / kLanes; ++v) {
    const std::uint32_t* c = codes + kLanes * v;
    for (int l = 0; l < kLanes; ++l) acc[l] |= c[l] << used;
    used += W;
    if (used >= 32) {
      used -= 32;
      for (int l = 0; l < kLanes; ++l) words[kLanes * word + l] = acc[l];
      ++word;
      // The bits of this code that did not fit start the next word.
      for (int l = 0; l < kLanes; ++l) acc[l] = used > 0 ? c[l] >> (W - used) : 0u;
    }
  }
  std::memcpy(out, words, sizeof(words));
}

template <int W>
void unpack_block(const std::uint8_t* in, std::uint32_t* codes) {
  constexpr std::uint32_t kMask = (1u << W) - 1;
  std::uint32_t words[W * kLanes];
  std::memcpy(words, in, sizeof(words));
  int used = 0;  // bits of the current word consumed
  int word = 0;
#pragma GCC unroll 32
  for (int v = 0; v < kBlock / kLanes; ++v) {
    std::uint32_t* c = codes + kLanes * v;
    for (int l = 0; l < kLanes; ++l) c[l] = words[kLanes * word + l] >> used;
    if (used + W > 32) {  // the code continues in the next word
      for (int l = 0; l < kLanes; ++l) c[l] |= words[kLanes * (word + 1) + l] << (32 - used);
    }
    for (int l = 0; l < kLanes; ++l) c[l] &= kMask;
    used += W;
    if (used >= 32) {
      used -= 32;
      ++word;
    }
  }
}

// The last n mod 512 codes: a plain LSB-first bit stream of `count` W-bit codes.
void pack_tail(const std::uint32_t* codes, std::int64_t count, int width, std::uint8_t* out) {
  std::uint64_t acc = 0;
  int used = 0;
  for (std::int64_t j = 0; j < count; ++j) {
    acc |= static_cast<std::uint64_t>(codes[j]) << used;
    for (used += width; used >= 8; used -= 8, acc >>= 8) *out++ = static_cast<std::uint8_t>(acc);
  }
  if (used > 0) *out = static_cast<std::uint8_t>(acc);
}

void unpack_tail(const std::uint8_t* in, std::int64_t count, int width, std::uint32_t* codes) {
  const std::uint64_t mask = (std::uint64_t{1} << width) - 1;
  std::uint64_t acc = 0;
  int held = 0;
  for (std::int64_t j = 0; j < count; ++j) {
    for (; held < width; held += 8) acc |= static_cast<std::uint64_t>(*in++) << held;
    codes[j] = static_cast<std::uint32_t>(acc & mask);
    acc >>= width;
    held -= width;
  }
}

// Calls fn(std::integral_constant<int, W>) for the runtime width w in 2..16.
template <typename Fn>
void with_width(int w, Fn fn) {
  switch (w) {
    case 2: return fn(std::integral_constant<int, 2>());
    case 3: return fn(std::integral_constant<int, 3>());
    case 4: return fn(std::integral_constant<int, 4>());
    case 5: return fn(std::integral_constant<int, 5>());
    case 6: return fn(std::integral_constant<int, 6>());
    case 7: return fn(std::integral_constant<int, 7>());
    case 8: return fn(std::integral_constant<int, 8>());
    case 9: return fn(std::integral_constant<int, 9>());
    case 10: return fn(std::integral_constant<int, 10>());
    case 11: return fn(std::integral_constant<int, 11>());
    case 12: return fn(std::integral_constant<int, 12>());
    case 13: return fn(std::integral_constant<int, 13>());
    case 14: return fn(std::integral_constant<int, 14>());
    case 15: return fn(std::integral_constant<int, 15>());
    case 16: return fn(std::integral_constant<int, 16>());
    default: DTRAIN_CHECK(false, "QSGD width {} outside 2..16", w);
  }
}

// The dither generators (qsgd_codec.h): 32 xorshift32 generators (Marsaglia 2003), generator g
// starting from splitmix64(seed + g) (never 0); element i takes generator 16 ((i div 16) mod 2) +
// (i mod 16), its output number (i div 32) + 1. Cheaper than a hash per element (six one-cycle
// vector instructions per 16 dithers, no multiply), and still a pure function of (seed, i).
inline std::uint32_t xorshift32(std::uint32_t x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}

// Two sets of 16 generators, for even and odd vectors of 16 elements: two independent dependency
// chains (each xorshift step is three dependent shift-xor pairs).
constexpr int kGenerators = 2 * kLanes;

void seed_lanes(std::uint64_t seed, std::uint32_t* state) {
  for (int l = 0; l < kGenerators; ++l) {
    const auto s = static_cast<std::uint32_t>(splitmix64(seed + static_cast<std::uint64_t>(l)));
    state[l] = s != 0 ? s : 0x9e3779b9u;
  }
}

// The code of one element: level | sign << (W - 1), level = min(floor(|x| scale + u), s) with
// the dither u = (r >> 8) x 2^-24 in [0, 1), r the lane's random number (one rounding: fma).
template <int W>
inline std::uint32_t code_of(float x, std::uint32_t r, float scale) {
  constexpr auto kTop = static_cast<float>((1u << (W - 1)) - 1);  // s
  const float u = static_cast<float>(r >> 8) * 0x1.0p-24f;
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(x);
  const float a = std::fma(std::bit_cast<float>(bits & 0x7fffffffu), scale, u);
  // a >= 0, so the cast floors; above s only by rounding (or NaN, from a non-finite x): s.
  const float clamped = a < kTop ? a : kTop;
  const auto level = static_cast<std::uint32_t>(static_cast<std::int32_t>(clamped));
  return level | ((bits >> 31) << (W - 1));
}

#if defined(__AVX512F__)
// One full block, fused: 16 elements per vector are quantized (the same arithmetic as code_of)
// and shifted into the lanes' words in registers; no array of codes. The loop over v is unrolled,
// so every shift is an immediate. `even`, `odd`: the two sets of generators, each advanced 16
// times.
template <int W>
inline void encode_block_avx512(const float* x, __m512 scale, __m512i& even, __m512i& odd,
                                std::uint8_t* out) {
  const __m512 top = _mm512_set1_ps(static_cast<float>((1u << (W - 1)) - 1));
  const __m512 to_unit = _mm512_set1_ps(0x1.0p-24f);
  const __m512i magnitude_mask = _mm512_set1_epi32(0x7fffffff);
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(1u << (W - 1)));
  __m512i r0 = even;
  __m512i r1 = odd;
  __m512i acc = _mm512_setzero_si512();
  int used = 0;  // bits of the current word filled
  int word = 0;
#pragma GCC unroll 32
  for (int v = 0; v < kBlock / kLanes; ++v) {
    __m512i& g = v % 2 == 0 ? r0 : r1;
    g = _mm512_xor_si512(g, _mm512_slli_epi32(g, 13));
    g = _mm512_xor_si512(g, _mm512_srli_epi32(g, 17));
    g = _mm512_xor_si512(g, _mm512_slli_epi32(g, 5));
    const __m512i r = g;
    const __m512 u = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_srli_epi32(r, 8)), to_unit);
    const __m512i bits = _mm512_castps_si512(_mm512_loadu_ps(x + kLanes * v));
    const __m512 magnitude = _mm512_castsi512_ps(_mm512_and_si512(bits, magnitude_mask));
    // min(a, top) is top when a is NaN (the second operand), as code_of's compare.
    const __m512 a = _mm512_min_ps(_mm512_fmadd_ps(magnitude, scale, u), top);
    const __m512i level = _mm512_cvttps_epi32(a);
    // The sign, moved from bit 31 to bit W - 1.
    const __m512i code =
        _mm512_or_si512(level, _mm512_and_si512(_mm512_srli_epi32(bits, 32 - W), sign_bit));
    acc = _mm512_or_si512(acc, _mm512_slli_epi32(code, used));
    used += W;
    if (used >= 32) {
      used -= 32;
      _mm512_storeu_si512(out + 64 * word, acc);
      ++word;
      // The bits of this code that did not fit start the next word.
      acc = used > 0 ? _mm512_srli_epi32(code, W - used) : _mm512_setzero_si512();
    }
  }
  even = r0;
  odd = r1;
}

// One full block back: codes from the lanes' words in registers, then level x step with the sign.
template <int W, bool kAdd>
inline void decode_block_avx512(const std::uint8_t* in, __m512 step, float* out) {
  const __m512i code_mask = _mm512_set1_epi32(static_cast<int>((1u << W) - 1));
  const __m512i level_mask = _mm512_set1_epi32(static_cast<int>((1u << (W - 1)) - 1));
  const __m512i sign_bit = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  int used = 0;  // bits of the current word consumed
  int word = 0;
  __m512i current = _mm512_loadu_si512(in);
#pragma GCC unroll 32
  for (int v = 0; v < kBlock / kLanes; ++v) {
    __m512i code = _mm512_srli_epi32(current, used);
    if (used + W >= 32 && word + 1 < W) {
      const __m512i next = _mm512_loadu_si512(in + 64 * (word + 1));
      if (used + W > 32) code = _mm512_or_si512(code, _mm512_slli_epi32(next, 32 - used));
      current = next;
    }
    if (used + W < 32 || (used + W > 32)) code = _mm512_and_si512(code, code_mask);
    const __m512 magnitude =
        _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(code, level_mask)), step);
    const __m512i sign = _mm512_and_si512(_mm512_slli_epi32(code, 32 - W), sign_bit);
    __m512 value = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(magnitude), sign));
    if constexpr (kAdd) value = _mm512_add_ps(value, _mm512_loadu_ps(out + kLanes * v));
    _mm512_storeu_ps(out + kLanes * v, value);
    used += W;
    if (used >= 32) {
      used -= 32;
      ++word;
    }
  }
}
#endif

// Quantizes x into the stream (after the norm); `scale` = s / norm, `state` the 32 generators
// (seed_lanes).
template <int W>
void encode_width(const float* x, std::int64_t n, float scale, std::uint32_t* state,
                  std::uint8_t* stream) {
  std::uint32_t codes[kBlock];
  std::int64_t start = 0;
#if defined(__AVX512F__)
  const __m512 vscale = _mm512_set1_ps(scale);
  __m512i even = _mm512_loadu_si512(state);
  __m512i odd = _mm512_loadu_si512(state + kLanes);
  for (; start + kBlock <= n; start += kBlock) {
    encode_block_avx512<W>(x + start, vscale, even, odd,
                           stream + start / kBlock * (W * kBlockBytesPerBit));
  }
  _mm512_storeu_si512(state, even);
  _mm512_storeu_si512(state + kLanes, odd);
#endif
  for (; start < n; start += kBlock) {
    const std::int64_t count = std::min(kBlock, n - start);
    for (std::int64_t v = 0; v * kLanes < count; ++v) {
      // Blocks hold an even number of vectors: vector v of this block has v's parity.
      std::uint32_t* lanes = state + (v % 2) * kLanes;
      for (int l = 0; l < kLanes; ++l) {
        lanes[l] = xorshift32(lanes[l]);
        const std::int64_t j = v * kLanes + l;
        if (j < count) codes[j] = code_of<W>(x[start + j], lanes[l], scale);
      }
    }
    std::uint8_t* at = stream + start / kBlock * (W * kBlockBytesPerBit);
    if (count == kBlock) {
      pack_block<W>(codes, at);
    } else {
      pack_tail(codes, count, W, at);
    }
  }
}

template <int W, bool kAdd>
void decode_width(const std::uint8_t* in, std::int64_t n, float* out) {
  constexpr std::uint32_t kLevelMask = (1u << (W - 1)) - 1;
  float norm;
  std::memcpy(&norm, in, kNormBytes);
  const float step = norm / static_cast<float>(kLevelMask);  // norm / s
  const std::uint8_t* stream = in + kNormBytes;
  std::uint32_t codes[kBlock];
  std::int64_t start = 0;
#if defined(__AVX512F__)
  const __m512 vstep = _mm512_set1_ps(step);
  for (; start + kBlock <= n; start += kBlock) {
    decode_block_avx512<W, kAdd>(stream + start / kBlock * (W * kBlockBytesPerBit), vstep,
                                 out + start);
  }
#endif
  for (; start < n; start += kBlock) {
    const std::int64_t count = std::min(kBlock, n - start);
    const std::uint8_t* at = stream + start / kBlock * (W * kBlockBytesPerBit);
    if (count == kBlock) {
      unpack_block<W>(at, codes);
    } else {
      unpack_tail(at, count, W, codes);
    }
    for (std::int64_t j = 0; j < count; ++j) {
      const float magnitude = static_cast<float>(codes[j] & kLevelMask) * step;
      const std::uint32_t sign = (codes[j] << (32 - W)) & 0x80000000u;
      const float v = std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
      if constexpr (kAdd) {
        out[start + j] += v;
      } else {
        out[start + j] = v;
      }
    }
  }
}

}  // namespace

QsgdCodec::QsgdCodec(int bits) : bits_(bits), levels_((1 << (bits - 1)) - 1) {
  DTRAIN_CHECK(bits >= 2 && bits <= 16, "QSGD bits {} outside 2..16", bits);
}

std::string QsgdCodec::name() const { return fmt::format("qsgd:{}", bits_); }

std::size_t QsgdCodec::encoded_bytes(std::int64_t n) const {
  return kNormBytes + static_cast<std::size_t>((n * bits_ + 7) / 8);
}

void QsgdCodec::encode(const float* x, std::int64_t n, std::uint8_t* out,
                       std::uint64_t seed) const {
  const auto norm = static_cast<float>(std::sqrt(sum_squares(x, n)));
  std::memcpy(out, &norm, kNormBytes);
  // s / norm: |x_i| x scale is in [0, s] up to rounding; 0 for a zero buffer.
  const float scale = norm > 0.0f ? static_cast<float>(levels_) / norm : 0.0f;
  std::uint32_t state[kGenerators];
  seed_lanes(seed, state);
  with_width(bits_, [&](auto w) {
    encode_width<decltype(w)::value>(x, n, scale, state, out + kNormBytes);
  });
}

void QsgdCodec::decode(const std::uint8_t* in, std::int64_t n, float* out, std::uint64_t) const {
  with_width(bits_, [&](auto w) { decode_width<decltype(w)::value, false>(in, n, out); });
}

void QsgdCodec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                           std::uint64_t) const {
  with_width(bits_, [&](auto w) { decode_width<decltype(w)::value, true>(in, n, out); });
}

}  // namespace dtrain::compress
