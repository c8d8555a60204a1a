#include "dtrain/base/rng.h"

#include <cmath>
#include <numbers>

namespace dtrain {
namespace {

constexpr std::uint32_t kPhiloxM0 = 0xD2511F53u;
constexpr std::uint32_t kPhiloxM1 = 0xCD9E8D57u;
constexpr std::uint32_t kPhiloxW0 = 0x9E3779B9u;
constexpr std::uint32_t kPhiloxW1 = 0xBB67AE85u;

inline void mulhilo(std::uint32_t a, std::uint32_t b, std::uint32_t& hi, std::uint32_t& lo) {
  const std::uint64_t product = static_cast<std::uint64_t>(a) * b;
  hi = static_cast<std::uint32_t>(product >> 32);
  lo = static_cast<std::uint32_t>(product);
}

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo) {
  std::uint32_t c0 = static_cast<std::uint32_t>(counter_lo);
  std::uint32_t c1 = static_cast<std::uint32_t>(counter_lo >> 32);
  std::uint32_t c2 = static_cast<std::uint32_t>(counter_hi);
  std::uint32_t c3 = static_cast<std::uint32_t>(counter_hi >> 32);
  std::uint32_t k0 = static_cast<std::uint32_t>(key);
  std::uint32_t k1 = static_cast<std::uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    std::uint32_t hi0, lo0, hi1, lo1;
    mulhilo(kPhiloxM0, c0, hi0, lo0);
    mulhilo(kPhiloxM1, c2, hi1, lo1);
    const std::uint32_t n0 = hi1 ^ c1 ^ k0;
    const std::uint32_t n1 = lo1;
    const std::uint32_t n2 = hi0 ^ c3 ^ k1;
    const std::uint32_t n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += kPhiloxW0;
    k1 += kPhiloxW1;
  }
  return {c0, c1, c2, c3};
}

std::uint32_t Rng::next_u32() {
  if (used_ == 4) {
    block_ = philox4x32(seed_, stream_, block_index_++);
    used_ = 0;
  }
  return block_[used_++];
}

std::uint64_t Rng::next_u64() {
  const std::uint64_t hi = next_u32();
  return (hi << 32) | next_u32();
}

float Rng::uniform() { return static_cast<float>(next_u32() >> 8) * 0x1.0p-24f; }

std::uint64_t Rng::below(std::uint64_t bound) {
  // Lemire's nearly divisionless method on 64 bits would need 128-bit products; rejection on the
  // largest multiple of bound is simple and exact.
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t x = next_u64();
  while (x >= limit) x = next_u64();
  return x % bound;
}

float Rng::normal() {
  if (has_spare_normal_) {
    has_spare_normal_ = false;
    return spare_normal_;
  }
  // u1 in (0, 1] so that log(u1) is finite.
  const double u1 = (static_cast<double>(next_u32()) + 1.0) * 0x1.0p-32;
  const double u2 = static_cast<double>(next_u32()) * 0x1.0p-32;
  const double radius = std::sqrt(-2.0 * std::log(u1));
  const double angle = 2.0 * std::numbers::pi * u2;
  spare_normal_ = static_cast<float>(radius * std::sin(angle));
  has_spare_normal_ = true;
  return static_cast<float>(radius * std::cos(angle));
}

void Rng::seek(std::uint64_t word_index) {
  block_index_ = word_index / 4;
  block_ = philox4x32(seed_, stream_, block_index_++);
  used_ = static_cast<int>(word_index % 4);
  has_spare_normal_ = false;
}

std::uint64_t rng_stream(std::uint64_t purpose, std::uint64_t a, std::uint64_t b) {
  return splitmix64(splitmix64(splitmix64(purpose) ^ a) ^ b);
}

}  // namespace dtrain
