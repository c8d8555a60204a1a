// PlacedFloats: zero-filled floats starting at the asked-for offset within a page, kept by copies
// and by move_to, which must carry the values.
#include "dtrain/base/placed_floats.h"

#include <gtest/gtest.h>

#include <utility>

#include "dtrain/base/error.h"

namespace dtrain {
namespace {

TEST(PlacedFloats, StartsAtTheOffsetZeroFilled) {
  for (std::size_t offset :
       {std::size_t{0}, std::size_t{4}, std::size_t{1024}, std::size_t{4092}}) {
    PlacedFloats floats(3000, offset);
    EXPECT_EQ(floats.page_offset(), offset);
    EXPECT_EQ(PlacedFloats::page_offset_of(floats.data()), offset);
    ASSERT_EQ(floats.size(), 3000);
    for (float value : floats.span()) EXPECT_EQ(value, 0.0f);
  }
  EXPECT_EQ(PlacedFloats(10, 4096 + 8).page_offset(), 8u);  // modulo the page
  EXPECT_TRUE(PlacedFloats(0, 64).empty());
}

TEST(PlacedFloats, RejectsOffsetsThatSplitAFloat) {
  EXPECT_THROW(PlacedFloats(10, 6), InternalError);
  EXPECT_THROW(PlacedFloats(-1, 0), InternalError);
}

TEST(PlacedFloats, CopiesKeepOffsetAndValuesMovesEmptyTheSource) {
  PlacedFloats a(100, 2048);
  for (std::int64_t i = 0; i < a.size(); ++i) a.data()[i] = static_cast<float>(i) * 0.5f;
  const PlacedFloats b = a;
  EXPECT_EQ(b.page_offset(), 2048u);
  EXPECT_NE(b.data(), a.data());
  for (std::int64_t i = 0; i < b.size(); ++i) EXPECT_EQ(b.data()[i], static_cast<float>(i) * 0.5f);
  PlacedFloats c = std::move(a);
  EXPECT_TRUE(a.empty());  // NOLINT(bugprone-use-after-move): the documented moved-from state
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(c.size(), 100);
  EXPECT_EQ(c.page_offset(), 2048u);
}

TEST(PlacedFloats, MoveToCarriesTheValues) {
  PlacedFloats floats(5000, 0);
  for (std::int64_t i = 0; i < floats.size(); ++i) floats.data()[i] = static_cast<float>(i);
  floats.move_to(1036);
  EXPECT_EQ(floats.page_offset(), 1036u);
  ASSERT_EQ(floats.size(), 5000);
  for (std::int64_t i = 0; i < floats.size(); ++i)
    EXPECT_EQ(floats.data()[i], static_cast<float>(i));
  const float* before = floats.data();
  floats.move_to(1036);  // already there: nothing moves
  EXPECT_EQ(floats.data(), before);
}

}  // namespace
}  // namespace dtrain
