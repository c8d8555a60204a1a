#include "dtrain/base/split.h"

#include <gtest/gtest.h>

namespace dtrain {
namespace {

using Pieces = std::vector<std::string>;

TEST(Split, KeepsEmptyPiecesForTheCallerToJudge) {
  EXPECT_EQ(split("1,2,4", ','), (Pieces{"1", "2", "4"}));
  EXPECT_EQ(split("a,,b", ','), (Pieces{"a", "", "b"}));
  EXPECT_EQ(split("a,", ','), (Pieces{"a", ""}));
  EXPECT_EQ(split("", ','), (Pieces{""}));
  EXPECT_EQ(split("no-separator", ','), (Pieces{"no-separator"}));
}

}  // namespace
}  // namespace dtrain
