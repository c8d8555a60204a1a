#include "dtrain/compress/qsgd_codec.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "dtrain/base/error.h"
#include "dtrain/compress/sums.h"

namespace dtrain::compress {
namespace {

constexpr std::size_t kNormBytes = 4;

// A 32-bit integer hash (C. Wellons' lowbias32): a bijection with good avalanche, cheap enough to
// vectorize (two multiplies).
inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The stream (docs in qsgd_codec.h): full blocks of kBlock = 256 codes as 8 interleaved lanes,
// lane l holding codes l, l + 8, ..., l + 248 packed LSB-first into W 32-bit words, word w of
// lane l at word 8 w + l of the block (W x 32 bytes: exactly 256 W bits). The lanes are
// independent, so every step below is one vector instruction over 8 lanes; the shifts and the word
// boundaries depend only on (v, W), constants once the loop over v is unrolled.
constexpr int kLanes = 8;
constexpr std::int64_t kBlock = 256;

template <int W>
void pack_block(const std::uint32_t* codes, std::uint8_t* out) {
  std::uint32_t words[W * kLanes];
  std::uint32_t acc[kLanes] = {};
  int used = 0;  // bits of the current word filled
  int word = 0;
#pragma GCC unroll 32
  for (int v = 0; v < 32; ++v) {
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
  for (int v = 0; v < 32; ++v) {
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

// The last n mod 256 codes: a plain LSB-first bit stream of `count` W-bit codes.
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

// Quantizes x into the stream (after the norm); `scale` = s / norm. The dither of element i is
// the hash of i ^ key: one hash (two multiplies) per element, which the compiler vectorizes.
template <int W>
void encode_width(const float* x, std::int64_t n, float scale, std::uint32_t key,
                  std::uint8_t* stream) {
  constexpr auto kTop = static_cast<float>((1u << (W - 1)) - 1);  // s
  std::uint32_t codes[kBlock];
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t count = std::min(kBlock, n - start);
    for (std::int64_t j = 0; j < count; ++j) {
      const auto i = static_cast<std::uint32_t>(start + j);
      const float u = static_cast<float>(mix32(i ^ key) >> 8) * 0x1.0p-24f;
      const std::uint32_t bits = std::bit_cast<std::uint32_t>(x[start + j]);
      const float a = std::bit_cast<float>(bits & 0x7fffffffu) * scale + u;
      // a >= 0, so the cast floors; above s only by rounding (or NaN, from a non-finite x): s.
      const float clamped = a < kTop ? a : kTop;
      const auto level = static_cast<std::uint32_t>(static_cast<std::int32_t>(clamped));
      codes[j] = level | ((bits >> 31) << (W - 1));
    }
    std::uint8_t* at = stream + start / kBlock * (W * 32);
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
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const std::int64_t count = std::min(kBlock, n - start);
    const std::uint8_t* at = stream + start / kBlock * (W * 32);
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
  with_width(bits_, [&](auto w) {
    encode_width<decltype(w)::value>(x, n, scale, static_cast<std::uint32_t>(splitmix64(seed)),
                                     out + kNormBytes);
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
