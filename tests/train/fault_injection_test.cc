// parallel.inject_fault (fault_injection.h): the spec's forms and errors, and that a fault fires
// once per run folder.
#include "dtrain/train/fault_injection.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "dtrain/base/error.h"
#include "temp_dir.h"

namespace dtrain::train {
namespace {

using dtrain::testing::TempDir;
using ::testing::HasSubstr;

TEST(FaultInjection, ParsesRankAndStep) {
  EXPECT_EQ(parse_fault("").rank, -1);
  const FaultSpec spec = parse_fault("rank=2,step=40");
  EXPECT_EQ(spec.rank, 2);
  EXPECT_EQ(spec.step, 40);
  EXPECT_THAT([] { parse_fault("rank=2"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("needs a rank and a step")));
  EXPECT_THAT([] { parse_fault("rank=2,step=-1"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("step must be a count >= 0")));
  EXPECT_THAT([] { parse_fault("rank=2,when=3"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("unknown or repeated key 'when'")));
  const FaultSpec every = parse_fault("rank=1,every=20");
  EXPECT_EQ(every.rank, 1);
  EXPECT_EQ(every.every, 20);
  EXPECT_THAT([] { parse_fault("rank=1,every=0"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("at least 1 step")));
  EXPECT_THAT([] { parse_fault("rank=1,step=3,every=2"); },
              ::testing::ThrowsMessage<ConfigError>(HasSubstr("repeated key 'every'")));
}

TEST(FaultInjection, EveryFiresOnceAfterEachMultiple) {
  TempDir run;
  const FaultSpec spec = parse_fault("rank=0,every=3");
  EXPECT_NO_THROW(inject_fault(spec, 0, 0, false, run.folder()));
  EXPECT_NO_THROW(inject_fault(spec, 0, 2, false, run.folder()));
  EXPECT_THROW(inject_fault(spec, 0, 3, false, run.folder()), Error);
  EXPECT_NO_THROW(inject_fault(spec, 0, 3, false, run.folder()));  // the restart passes it
  EXPECT_THROW(inject_fault(spec, 0, 6, false, run.folder()), Error);
  EXPECT_NO_THROW(inject_fault(spec, 0, 6, false, run.folder()));
  EXPECT_NO_THROW(inject_fault(spec, 1, 9, false, run.folder()));  // another rank
}

TEST(FaultInjection, FiresOnceOnItsRankAndStep) {
  TempDir run;
  const FaultSpec spec = parse_fault("rank=1,step=5");
  EXPECT_NO_THROW(inject_fault(spec, 0, 5, false, run.folder()));  // another rank
  EXPECT_NO_THROW(inject_fault(spec, 1, 4, false, run.folder()));  // another step
  EXPECT_THAT([&] { inject_fault(spec, 1, 5, false, run.folder()); },
              ::testing::ThrowsMessage<Error>(HasSubstr("rank 1: injected fault after step 5")));
  EXPECT_TRUE(std::filesystem::exists(run.file(".injected-fault")));
  EXPECT_NO_THROW(inject_fault(spec, 1, 5, false, run.folder()));  // a restart passes it
}

}  // namespace
}  // namespace dtrain::train
