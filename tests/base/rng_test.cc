#include "dtrain/base/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

namespace dtrain {
namespace {

// Known-answer vectors of Philox4x32-10 from Random123's kat_vectors file.
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32(0, 0, 0),
            (std::array<std::uint32_t, 4>{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32(0xffffffffffffffffull, 0xffffffffffffffffull, 0xffffffffffffffffull),
            (std::array<std::uint32_t, 4>{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  // counter words (0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), key (0xa4093822, 0x299f31d0)
  EXPECT_EQ(philox4x32(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
            (std::array<std::uint32_t, 4>{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Rng, SameSeedAndStreamGiveSameSequence) {
  Rng a(42, 7), b(42, 7), c(42, 8), d(43, 7);
  int differ_stream = 0, differ_seed = 0;
  for (int i = 0; i < 100; ++i) {
    const auto x = a.next_u32();
    EXPECT_EQ(x, b.next_u32());
    differ_stream += x != c.next_u32();
    differ_seed += x != d.next_u32();
  }
  EXPECT_GT(differ_stream, 95);
  EXPECT_GT(differ_seed, 95);
}

TEST(Rng, SeekGivesRandomAccess) {
  Rng sequential(5, 1);
  std::vector<std::uint32_t> words;
  for (int i = 0; i < 23; ++i) words.push_back(sequential.next_u32());
  for (std::uint64_t i : {0u, 1u, 3u, 4u, 13u, 22u}) {
    Rng jump(5, 1);
    jump.seek(i);
    EXPECT_EQ(jump.next_u32(), words[i]) << "word " << i;
  }
}

TEST(Rng, UniformAndNormalHaveTheRightMoments) {
  Rng rng(1);
  const int n = 200000;
  double sum_u = 0, sum_n = 0, sum_n2 = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum_u += u;
    const double z = rng.normal();
    sum_n += z;
    sum_n2 += z * z;
  }
  // Standard errors: uniform mean 1/sqrt(12n) ~ 6.5e-4; normal mean 1/sqrt(n) ~ 2.2e-3.
  EXPECT_NEAR(sum_u / n, 0.5, 4e-3);
  EXPECT_NEAR(sum_n / n, 0.0, 1.2e-2);
  EXPECT_NEAR(sum_n2 / n, 1.0, 1.5e-2);
}

TEST(Rng, BelowIsInRangeAndCoversIt) {
  Rng rng(3);
  std::set<std::uint64_t> seen;
  for (int i = 0; i < 1000; ++i) {
    const auto v = rng.below(7);
    ASSERT_LT(v, 7u);
    seen.insert(v);
  }
  EXPECT_EQ(seen.size(), 7u);
}

TEST(Rng, StreamsFromDifferentPurposesDiffer) {
  EXPECT_NE(rng_stream(1, 0, 0), rng_stream(2, 0, 0));
  EXPECT_NE(rng_stream(1, 1, 0), rng_stream(1, 0, 1));
  EXPECT_EQ(rng_stream(9, 4, 2), rng_stream(9, 4, 2));
}

}  // namespace
}  // namespace dtrain
