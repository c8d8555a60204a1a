// data_parallel.sum_in_update: "auto" fuses the gradient sums into the update where every condition
// holds and names the first that does not; "true" where one fails is a ConfigError naming it.
#include "dtrain/train/strategies/data_parallel/fused_update_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/base/error.h"

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

FusedUpdateInputs threads_sgd() { return {true, false, true, "sgd"}; }

TEST(FusedUpdatePolicy, AutoFusesShardedSgdOnThreadRanksWithoutOverlap) {
  const FusedUpdateDecision d = decide_fused_update("auto", threads_sgd());
  EXPECT_TRUE(d.fused);
  EXPECT_THAT(d.reason, HasSubstr("auto"));
  EXPECT_TRUE(decide_fused_update("true", threads_sgd()).fused);
  EXPECT_FALSE(decide_fused_update("false", threads_sgd()).fused);
}

TEST(FusedUpdatePolicy, AutoNamesWhatIsMissing) {
  FusedUpdateInputs in = threads_sgd();
  in.sharded = false;
  EXPECT_THAT(decide_fused_update("auto", in).reason, HasSubstr("zero_stage"));
  in = threads_sgd();
  in.overlap = true;
  EXPECT_THAT(decide_fused_update("auto", in).reason, HasSubstr("overlap"));
  in = threads_sgd();
  in.shares_memory = false;
  EXPECT_THAT(decide_fused_update("auto", in).reason, HasSubstr("processes"));
  in = threads_sgd();
  in.optimizer = "lars";
  const FusedUpdateDecision lars = decide_fused_update("auto", in);
  EXPECT_FALSE(lars.fused);
  EXPECT_THAT(lars.reason, HasSubstr("lars"));
}

TEST(FusedUpdatePolicy, AdamAndAdamWFuseToo) {
  for (const char* name : {"adam", "adamw"}) {
    FusedUpdateInputs in = threads_sgd();
    in.optimizer = name;
    const FusedUpdateDecision d = decide_fused_update("auto", in);
    EXPECT_TRUE(d.fused) << name;
    EXPECT_THAT(d.reason, HasSubstr(name));
  }
}

TEST(FusedUpdatePolicy, TrueWhereItCannotApplyIsAConfigError) {
  FusedUpdateInputs in = threads_sgd();
  in.shares_memory = false;
  try {
    decide_fused_update("true", in);
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), HasSubstr("data_parallel.sum_in_update"));
    EXPECT_THAT(e.what(), HasSubstr("processes"));
  }
}

}  // namespace
}  // namespace dtrain::train
