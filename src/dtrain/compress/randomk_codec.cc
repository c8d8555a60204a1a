#include "dtrain/compress/randomk_codec.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "dtrain/base/rng.h"

namespace dtrain::compress {
namespace {

// The Philox stream of random-k's draws: apart from every other user of the seed.
constexpr std::uint64_t kRandomkStream = 0x72616e646f6d6bULL;  // "randomk"

// Calls visit(i) for the k indices of `seed` in ascending order.
template <typename Visit>
void for_each_index(std::int64_t n, std::int64_t k, std::uint64_t seed, Visit visit) {
  if (k == 0) return;
  thread_local std::vector<std::uint64_t> bitmap;  // kept per thread: no allocation per step
  const std::size_t words = static_cast<std::size_t>((n + 63) / 64);
  bitmap.assign(words, 0);
  auto test = [&](std::int64_t i) { return (bitmap[i / 64] >> (i % 64)) & 1u; };
  auto mark = [&](std::int64_t i) { bitmap[i / 64] |= std::uint64_t{1} << (i % 64); };
  // Floyd: for j = n-k .. n-1, draw t in [0, j]; take t, or j if t is already taken. Every
  // k-subset comes out with the same probability.
  Rng rng(seed, rng_stream(kRandomkStream));
  for (std::int64_t j = n - k; j < n; ++j) {
    const auto t = static_cast<std::int64_t>(rng.below(static_cast<std::uint64_t>(j + 1)));
    mark(test(t) ? j : t);
  }
  for (std::size_t w = 0; w < words; ++w) {
    for (std::uint64_t bits = bitmap[w]; bits != 0; bits &= bits - 1) {
      visit(static_cast<std::int64_t>(w) * 64 + std::countr_zero(bits));
    }
  }
}

}  // namespace

std::size_t RandomkCodec::encoded_bytes(std::int64_t n) const {
  return 4 * static_cast<std::size_t>(keep_.of(n));
}

void RandomkCodec::encode(const float* x, std::int64_t n, std::uint8_t* out,
                          std::uint64_t seed) const {
  const std::int64_t k = keep_.of(n);
  const float scale = scaled_ && k > 0 ? static_cast<float>(n) / static_cast<float>(k) : 1.0f;
  std::int64_t j = 0;
  for_each_index(n, k, seed, [&](std::int64_t i) {
    const float v = x[i] * scale;
    std::memcpy(out + 4 * j++, &v, 4);
  });
}

void RandomkCodec::decode(const std::uint8_t* in, std::int64_t n, float* out,
                          std::uint64_t seed) const {
  std::fill(out, out + n, 0.0f);
  decode_add(in, n, out, seed);
}

void RandomkCodec::decode_add(const std::uint8_t* in, std::int64_t n, float* out,
                              std::uint64_t seed) const {
  std::int64_t j = 0;
  for_each_index(n, keep_.of(n), seed, [&](std::int64_t i) {
    float v;
    std::memcpy(&v, in + 4 * j++, 4);
    out[i] += v;
  });
}

std::vector<std::int64_t> RandomkCodec::indices(std::int64_t n, std::uint64_t seed) const {
  std::vector<std::int64_t> result;
  for_each_index(n, keep_.of(n), seed, [&](std::int64_t i) { result.push_back(i); });
  return result;
}

}  // namespace dtrain::compress
