// How a buffer of `count` elements is cut into `parts` near-equal blocks (ring, sharded PS):
// block b is [b x count / parts, (b + 1) x count / parts), so sizes differ by at most one element
// and blocks are empty when count < parts. Also the segment arithmetic of pipelined algorithms.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace dtrain::comm {

inline std::int64_t block_begin(std::int64_t count, int parts, int block) {
  return count * block / parts;
}

inline std::int64_t block_size(std::int64_t count, int parts, int block) {
  return block_begin(count, parts, block + 1) - block_begin(count, parts, block);
}

// (a mod n) for a possibly negative a.
inline int ring_index(int a, int n) { return ((a % n) + n) % n; }

// Elements per pipelined segment: segment_bytes rounded down to whole elements, at least one.
inline std::int64_t segment_elements(std::size_t segment_bytes, std::size_t element_bytes) {
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(segment_bytes / element_bytes));
}

// Number of segments a block of n elements travels in (0 for an empty block: no message at all).
inline std::int64_t segment_count(std::int64_t n, std::int64_t segment) {
  return (n + segment - 1) / segment;
}

}  // namespace dtrain::comm
