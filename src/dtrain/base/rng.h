// Counter-based random numbers (Philox4x32-10, Salmon et al., SC'11).
//
// A counter-based generator is a pure function of (key, counter): the n-th number of stream s under
// seed k is the same whichever thread or rank draws it and in whatever order. That is what makes
// runs bitwise reproducible across thread counts and ranks: dropout masks, shuffles and
// initialisation each take their own stream and never share hidden state.
#pragma once

#include <array>
#include <cstdint>

namespace dtrain {

// One Philox4x32-10 block: 128 random bits for a 64-bit key and a 128-bit counter.
std::array<std::uint32_t, 4> philox4x32(std::uint64_t key, std::uint64_t counter_hi,
                                        std::uint64_t counter_lo);

// A sequential view of one Philox stream: Rng(seed, stream) yields block(seed, stream, 0), then
// block(seed, stream, 1), ... four 32-bit words at a time.
class Rng {
 public:
  explicit Rng(std::uint64_t seed, std::uint64_t stream = 0) : seed_(seed), stream_(stream) {}

  std::uint32_t next_u32();
  std::uint64_t next_u64();
  // Uniform in [0, 1) with 24 random bits.
  float uniform();
  // Uniform integer in [0, bound), without modulo bias; bound > 0.
  std::uint64_t below(std::uint64_t bound);
  // Standard normal by Box-Muller (both values of a pair are used).
  float normal();

  // Skips to the n-th 32-bit word of the stream, for random access.
  void seek(std::uint64_t word_index);

 private:
  std::uint64_t seed_;
  std::uint64_t stream_;
  std::uint64_t block_index_ = 0;
  std::array<std::uint32_t, 4> block_{};
  int used_ = 4;
  bool has_spare_normal_ = false;
  float spare_normal_ = 0.0f;
};

// Derives an independent stream id from a purpose tag and up to two indices (e.g. epoch, rank), so
// that callers do not invent overlapping stream numbers.
std::uint64_t rng_stream(std::uint64_t purpose, std::uint64_t a = 0, std::uint64_t b = 0);

}  // namespace dtrain
