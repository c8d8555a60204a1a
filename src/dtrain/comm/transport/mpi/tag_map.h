// How a 64-bit Transport tag becomes an MPI tag (an int in [0, MPI_TAG_UB]), and the argument why
// a message can never silently match the wrong receive (docs/MPI.md, "Tags").
//
// Transport tags (communicator.cc): collectives carry the communicator id in bits 47..62 (0 for a
// world communicator, split's ids for sub-communicators), the sequence number in bits 24..46, the
// caller's tag in 8..23 and the phase in 0..7; point-to-point messages set bit 63 and carry the
// caller's tag below it. An MPI tag has only log2(MPI_TAG_UB + 1) bits (31 in Open MPI, at least
// 15 by the standard), so the map cannot be injective. It is chosen so that the tags that can be
// in flight at the same time in a correct program map to different MPI tags:
//   collectives:     v = phase[0..2] | caller[0..5] << 3 | communicator[0..9] << 9
//                        | sequence[0..11] << 19 | the remaining bits of each field above bit 31
//   point-to-point:  v = tag without bit 63 (it selects a separate MPI communicator instead)
//   MPI tag = v folded by XOR into `bits`-bit chunks.
// With 31 bits the lowest chunk is exactly those four fields, so two collective tags map to
// different MPI tags whenever they differ in phase, in a caller tag below 64, in a communicator id
// below 1024, or in sequence numbers less than 2^12 apart (tests/comm_mpi/tag_map_test.cc).
//
// Correctness does not rest on the map: every message starts with a header holding the full
// 64-bit tag, which the receiver compares with its own (request.h); a receive that matched a
// message with another tag (a stale message after a timeout, a collision) fails with a CommError
// naming both tags, never delivers the bytes.
#pragma once

#include <cstdint>

namespace dtrain::comm::mpi {

inline constexpr std::uint64_t kPointToPointBit = std::uint64_t{1} << 63;

// Number of usable tag bits for a given MPI_TAG_UB: floor(log2(tag_ub + 1)), at most 31.
int tag_bits(long long tag_ub);

// The MPI tag of transport tag `tag` in [0, 2^bits); bits in [1, 31].
int fold_tag(std::uint64_t tag, int bits);

}  // namespace dtrain::comm::mpi
