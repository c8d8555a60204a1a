#include "dtrain/comm/transport/mpi/tag_map.h"

namespace dtrain::comm::mpi {

int tag_bits(long long tag_ub) {
  int bits = 0;
  while (bits < 31 && (1LL << (bits + 1)) - 1 <= tag_ub) ++bits;
  return bits;
}

int fold_tag(std::uint64_t tag, int bits) {
  std::uint64_t v = 0;
  if ((tag & kPointToPointBit) != 0) {
    v = tag & ~kPointToPointBit;
  } else {
    // Low 31 bits: [3 phase | 6 caller tag | 10 communicator id | 12 sequence]; the rest above,
    // folded in by the XOR below.
    const std::uint64_t phase = tag & 0xff;
    const std::uint64_t caller = (tag >> 8) & 0xffff;
    const std::uint64_t sequence = (tag >> 24) & ((std::uint64_t{1} << 23) - 1);
    const std::uint64_t communicator = (tag >> 47) & 0xffff;
    v = (phase & 0x7) | ((caller & 0x3f) << 3) | ((communicator & 0x3ff) << 9) |
        ((sequence & 0xfff) << 19) | ((caller >> 6) << 31) | ((communicator >> 10) << 41) |
        ((sequence >> 12) << 47) | ((phase >> 3) << 58);
  }
  const std::uint64_t mask = (std::uint64_t{1} << bits) - 1;
  std::uint64_t folded = 0;
  for (; v != 0; v >>= bits) folded ^= v & mask;
  return static_cast<int>(folded);
}

}  // namespace dtrain::comm::mpi
