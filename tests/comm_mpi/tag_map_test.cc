// The MPI tag map (transport/mpi/tag_map.h): the tags that can be in flight together in a correct
// program map to different MPI tags, and every MPI tag is within MPI_TAG_UB.
#include "dtrain/comm/transport/mpi/tag_map.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>

namespace dtrain::comm::mpi {
namespace {

// The layout of communicator.cc: communicator id in bits 47..62, sequence in 24..46.
std::uint64_t collective_tag(std::uint64_t seq, std::uint16_t tag, std::uint64_t phase,
                             std::uint64_t communicator = 0) {
  return (communicator << 47) | ((seq & ((std::uint64_t{1} << 23) - 1)) << 24) |
         (std::uint64_t{tag} << 8) | phase;
}

TEST(TagMapTest, TagBitsFollowTagUpperBound) {
  EXPECT_EQ(tag_bits(32767), 15);       // the standard's minimum
  EXPECT_EQ(tag_bits(0x7fffffff), 31);  // Open MPI's ob1
  EXPECT_EQ(tag_bits(0x3fffff), 22);
  EXPECT_EQ(tag_bits(0x400000), 22);  // not 2^23 - 1: the 23-bit values do not all fit
}

TEST(TagMapTest, ResultIsWithinTheBits) {
  for (int bits : {15, 22, 31}) {
    for (std::uint64_t tag : {std::uint64_t{0}, ~std::uint64_t{0}, kPointToPointBit | 12345,
                              collective_tag(123456789, 0xffff, 2)}) {
      const int mpi_tag = fold_tag(tag, bits);
      EXPECT_GE(mpi_tag, 0);
      EXPECT_LT(mpi_tag, std::int64_t{1} << bits);
    }
  }
}

// Any window of 4096 consecutive sequence numbers, every phase and a few caller tags: all
// distinct at 31 bits, including windows that cross a carry into the higher chunks.
TEST(TagMapTest, NearbyCollectivesNeverCollideAt31Bits) {
  for (std::uint64_t start :
       {std::uint64_t{0}, std::uint64_t{4000}, (std::uint64_t{1} << 23) - 2000,
        (std::uint64_t{1} << 12) * 1000 - 7}) {
    for (std::uint16_t caller : {std::uint16_t{0}, std::uint16_t{1}, std::uint16_t{0xffff}}) {
      std::set<int> seen;
      for (std::uint64_t seq = start; seq < start + 4096; ++seq) {
        for (std::uint64_t phase = 0; phase < 8; ++phase) {
          ASSERT_TRUE(seen.insert(fold_tag(collective_tag(seq, caller, phase), 31)).second)
              << "seq " << seq << " caller " << caller << " phase " << phase;
        }
      }
    }
  }
}

TEST(TagMapTest, CommunicatorsAreDistinctWithinOneSequenceNumber) {
  // A parent and its sub-communicators run collectives with the same sequence numbers at once.
  std::set<int> seen;
  for (std::uint64_t communicator = 0; communicator < 1024; ++communicator) {
    for (std::uint64_t phase = 0; phase < 8; ++phase) {
      ASSERT_TRUE(seen.insert(fold_tag(collective_tag(77, 0, phase, communicator), 31)).second)
          << "communicator " << communicator;
    }
  }
}

TEST(TagMapTest, CallerTagsAreDistinctWithinOneCollective) {
  std::set<int> seen;
  for (std::uint32_t caller = 0; caller < 64; ++caller) {
    ASSERT_TRUE(seen.insert(fold_tag(collective_tag(77, static_cast<std::uint16_t>(caller), 0), 31))
                    .second);
  }
}

TEST(TagMapTest, SmallPointToPointTagsAreTheirOwnMpiTag) {
  for (std::uint64_t tag = 0; tag < 1000; ++tag) {
    EXPECT_EQ(fold_tag(kPointToPointBit | tag, 31), static_cast<int>(tag));
  }
}

}  // namespace
}  // namespace dtrain::comm::mpi
