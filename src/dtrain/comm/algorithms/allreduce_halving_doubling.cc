// Halving-doubling allreduce (Rabenseifner; Thakur, Rabenseifner and Gropp 2005), as in MPICH and
// Gloo.
//
// Steps, with p' the largest power of two <= P and rem = P - p':
// 1. Fold: among ranks 0 .. 2 rem - 1, each even rank sends its whole buffer to the odd rank
//    above it, which reduces it, and sits out steps 2-3. The remaining p' ranks are renumbered
//    0 .. p'-1 (odd rank r < 2 rem -> r / 2, rank r >= 2 rem -> r - rem).
// 2. Recursive halving reduce-scatter: for distance d = p'/2, p'/4, ..., 1, a rank exchanges with
//    the rank whose new number differs in bit d: it sends the half of its current range that the
//    partner keeps and reduces the partner's copy of the half it keeps. After log2 p' rounds each
//    rank holds the full reduction of 1/p' of the buffer.
// 3. Recursive doubling allgather: the same exchanges in reverse order, each rank sending its
//    reduced range and receiving the partner's, so ranges double back to the whole buffer.
// 4. Unfold: each odd rank r < 2 rem sends the result to the even rank r - 1.
// Short buffers (at most kRecursiveDoublingBytes, or fewer elements than p') replace 2-3 with
// recursive doubling of the whole buffer (MPICH's short-message allreduce): for distance 1, 2,
// .., p'/2 a rank exchanges everything it holds with its partner and reduces, so log2 p' rounds
// instead of 2 log2 p', each of one message per rank. For P = 2 that is a single exchange: both
// values cross at once, one message latency where a reduce-then-send-back takes two. Every rank
// combines the same two partial results in each round (a op b on one side, b op a on the other,
// equal for the commutative ops), so all ranks end with identical bits.
//
// Cost: 2 log2(p') alpha + 2(p' - 1)/p' N beta + (p' - 1)/p' N gamma (short buffers: log2(p')
// (alpha + N beta + N gamma)), plus 2(alpha + N beta) + N gamma for the fold and unfold when P is
// not a power of two.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "dtrain/comm/algorithms/algorithms.h"

namespace dtrain::comm {

void allreduce_halving_doubling(Channel& channel, void* data, std::int64_t count, DType dtype,
                                ReduceOp op) {
  const int ranks = channel.size();
  const int rank = channel.rank();
  if (ranks == 1 || count == 0) return;
  const std::size_t element = dtype_size(dtype);
  auto* bytes = static_cast<std::byte*>(data);
  auto at = [&](std::int64_t index) { return bytes + static_cast<std::size_t>(index) * element; };
  auto size_of = [&](std::int64_t n) { return static_cast<std::size_t>(n) * element; };
  // Scratch for received halves: kept per thread and only grown, neither zero-filled nor freshly
  // mapped per call (at 64 MiB a new zeroed vector cost more than the exchange itself: 233 vs
  // 73 ms per call, docs/MPI.md). Each thread runs one collective at a time, so one buffer
  // suffices.
  thread_local std::vector<std::byte> scratch;
  if (scratch.size() < size_of(count)) scratch.resize(size_of(count));
  std::span<std::byte> incoming(scratch.data(), size_of(count));

  int power = 1;
  while (power * 2 <= ranks) power *= 2;
  const int rem = ranks - power;

  // 1. Fold.
  int new_rank = -1;
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      channel.send(rank + 1, data, size_of(count));
    } else {
      channel.recv(rank - 1, incoming.data(), size_of(count));
      reduce_into(data, incoming.data(), count, dtype, op);
      new_rank = rank / 2;
    }
  } else {
    new_rank = rank - rem;
  }
  auto real_rank = [&](int renumbered) {
    return renumbered < rem ? renumbered * 2 + 1 : renumbered + rem;
  };

  if (new_rank >= 0 && (size_of(count) <= kRecursiveDoublingBytes || count < power)) {
    // 2-3 for short buffers: recursive doubling of the whole buffer.
    for (int distance = 1; distance < power; distance *= 2) {
      const int partner = real_rank(new_rank ^ distance);
      channel.send_recv(partner, data, size_of(count), partner, incoming.data(), size_of(count));
      reduce_into(data, incoming.data(), count, dtype, op);
    }
  } else if (new_rank >= 0) {
    // 2. Recursive halving; `ranges` remembers each round's range for the doubling.
    std::int64_t lo = 0;
    std::int64_t hi = count;
    std::vector<std::pair<std::int64_t, std::int64_t>> ranges;
    for (int distance = power / 2; distance >= 1; distance /= 2) {
      const int partner = real_rank(new_rank ^ distance);
      const std::int64_t mid = lo + (hi - lo) / 2;
      ranges.emplace_back(lo, hi);
      const bool upper = (new_rank & distance) != 0;
      const std::int64_t keep_lo = upper ? mid : lo;
      const std::int64_t keep_hi = upper ? hi : mid;
      const std::int64_t give_lo = upper ? lo : mid;
      const std::int64_t give_hi = upper ? mid : hi;
      channel.send_recv(partner, at(give_lo), size_of(give_hi - give_lo), partner, incoming.data(),
                        size_of(keep_hi - keep_lo));
      reduce_into(at(keep_lo), incoming.data(), keep_hi - keep_lo, dtype, op);
      lo = keep_lo;
      hi = keep_hi;
    }
    // 3. Recursive doubling: the partner of each round holds the other half of that round's range.
    for (int distance = 1; distance < power; distance *= 2) {
      const int partner = real_rank(new_rank ^ distance);
      const auto [outer_lo, outer_hi] = ranges.back();
      ranges.pop_back();
      const std::int64_t other_lo = lo == outer_lo ? hi : outer_lo;
      const std::int64_t other_hi = lo == outer_lo ? outer_hi : lo;
      channel.send_recv(partner, at(lo), size_of(hi - lo), partner, at(other_lo),
                        size_of(other_hi - other_lo));
      lo = outer_lo;
      hi = outer_hi;
    }
  }

  // 4. Unfold.
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      channel.recv(rank + 1, data, size_of(count));
    } else {
      channel.send(rank - 1, data, size_of(count));
    }
  }
}

}  // namespace dtrain::comm
