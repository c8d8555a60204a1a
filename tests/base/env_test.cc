// A child's environment (base/env.h): this process's variables without the dropped names (whole
// names, not prefixes), and argv-style pointers ending with nullptr.
#include "dtrain/base/env.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace dtrain::env {
namespace {

TEST(Env, EnvironmentWithoutDropsWholeNamesOnly) {
  ::setenv("DTRAIN_ENV_TEST", "1", 1);
  ::setenv("DTRAIN_ENV_TEST_LONGER", "2", 1);
  const std::vector<std::string> kept = environment_without({"DTRAIN_ENV_TEST"});
  const auto has = [&](const std::string& entry) {
    return std::find(kept.begin(), kept.end(), entry) != kept.end();
  };
  EXPECT_FALSE(has("DTRAIN_ENV_TEST=1"));
  EXPECT_TRUE(has("DTRAIN_ENV_TEST_LONGER=2"));
  EXPECT_TRUE(environment_without({}).size() == kept.size() + 1);
  ::unsetenv("DTRAIN_ENV_TEST");
  ::unsetenv("DTRAIN_ENV_TEST_LONGER");
}

TEST(Env, CStringsPointIntoTheStringsAndEndWithNull) {
  const std::vector<std::string> strings = {"a=1", "b=2"};
  const std::vector<char*> pointers = c_strings(strings);
  ASSERT_EQ(pointers.size(), 3U);
  EXPECT_EQ(pointers[0], strings[0].c_str());
  EXPECT_EQ(pointers[1], strings[1].c_str());
  EXPECT_EQ(pointers[2], nullptr);
}

}  // namespace
}  // namespace dtrain::env
