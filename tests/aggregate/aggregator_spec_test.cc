// The aggregator catalog by name: every accepted spec parses to an aggregator that prints it back;
// every bad one is a one-line ConfigError naming the value, the reason and the accepted values.
#include "dtrain/aggregate/aggregator_spec.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "dtrain/aggregate/bucketing.h"
#include "dtrain/aggregate/krum.h"
#include "dtrain/base/error.h"

namespace dtrain::aggregate {
namespace {

TEST(AggregatorSpecTest, AcceptedSpecsPrintThemselvesBack) {
  for (const std::string spec :
       {"mean", "median", "trimmed:0.2", "trimmed:0", "krum", "multikrum", "multikrum:3",
        "cclip:10", "cclip:0.5:3", "bucket:2,median", "bucket:2,bucket:3,krum", "bucket:1,cclip:1",
        "cclip:auto", "cclip:auto:3", "bucket:2,cclip:auto"}) {
    EXPECT_EQ(parse_aggregator(spec, 2)->name(), spec);
  }
  EXPECT_EQ(parse_aggregator("cclip", 0)->name(), "cclip:10");  // the default tau, 1 iteration
  EXPECT_EQ(parse_aggregator("krum", 3)->tolerated(100), 3);    // f is given separately
  EXPECT_EQ(parse_aggregator("bucket:2,trimmed:0.25", 0)->tolerated(16), 2);  // 8 buckets
}

TEST(AggregatorSpecTest, BadSpecsAreOneLineErrorsWithTheAcceptedValues) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"average", "unknown aggregator 'average'"},
      {"trimmed", "trimmed needs beta"},
      {"trimmed:0.5", "beta 0.5 outside [0, 0.5)"},
      {"trimmed:-0.1", "beta -0.1 outside [0, 0.5)"},
      {"trimmed:x", "beta 'x' is not a number"},
      {"median:3", "median takes no parameter"},
      {"krum:2", "krum takes no parameter"},
      {"multikrum:0", "m 0 must be >= 1"},
      {"multikrum:1.5", "m '1.5' is not an integer"},
      {"cclip:0", "tau 0 must be > 0"},
      {"cclip:1:0", "iterations 0 must be >= 1"},
      {"cclip:automatic", "tau 'automatic' is not a number"},
      {"cclip:auto:0", "iterations 0 must be >= 1"},
      {"bucket:2", "bucket needs a size and an aggregator"},
      {"bucket:0,median", "bucket size 0 must be >= 1"},
      {"bucket:2,foo", "unknown aggregator 'foo'"},
  };
  for (const auto& [spec, why] : cases) {
    try {
      parse_aggregator(spec, 1);
      ADD_FAILURE() << spec << ": no error";
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("aggregator '" + spec + "': " + why), std::string::npos) << message;
      EXPECT_NE(message.find("accepted: mean, median, trimmed:<beta in [0, 0.5)>"),
                std::string::npos)
          << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    }
  }
  EXPECT_THROW(parse_aggregator("median", -1), ConfigError);
}

}  // namespace
}  // namespace dtrain::aggregate
