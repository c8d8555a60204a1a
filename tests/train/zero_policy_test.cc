// parallel.zero_stage = "auto" shards the optimizer where sharding applies and says why not
// elsewhere; "0" and "1" are obeyed.
#include "dtrain/train/strategies/data_parallel/zero_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

TEST(ZeroPolicy, AutoShardsRingTrainingOfSeveralRanksWithAnElementWiseOptimizer) {
  for (const char* optimizer : {"sgd", "adam", "adamw"}) {
    const ZeroDecision decision = decide_zero_stage("auto", 2, optimizer, "ring");
    EXPECT_TRUE(decision.shard) << optimizer;
    EXPECT_THAT(decision.reason, HasSubstr("auto: 2 ranks, ring"));
  }
}

TEST(ZeroPolicy, AutoReplicatesWhereShardingDoesNotApplyAndSaysWhy) {
  const ZeroDecision one = decide_zero_stage("auto", 1, "sgd", "ring");
  EXPECT_FALSE(one.shard);
  EXPECT_THAT(one.reason, HasSubstr("one rank"));
  const ZeroDecision lars = decide_zero_stage("auto", 4, "lars", "ring");
  EXPECT_FALSE(lars.shard);
  EXPECT_THAT(lars.reason, HasSubstr("whole-tensor norms"));
  const ZeroDecision tree = decide_zero_stage("auto", 4, "sgd", "tree");
  EXPECT_FALSE(tree.shard);
  EXPECT_THAT(tree.reason, HasSubstr("parallel.allreduce = tree is kept"));
  const ZeroDecision compressed = decide_zero_stage("auto", 4, "sgd", "ring", "topk:0.01");
  EXPECT_FALSE(compressed.shard);
  EXPECT_THAT(compressed.reason, HasSubstr("compressed buckets (topk:0.01)"));
}

TEST(ZeroPolicy, ExplicitStagesAreObeyed) {
  EXPECT_TRUE(decide_zero_stage("1", 4, "sgd", "tree").shard);
  EXPECT_FALSE(decide_zero_stage("0", 4, "sgd", "ring").shard);
  EXPECT_THAT(decide_zero_stage("0", 4, "sgd", "ring").reason, HasSubstr("zero_stage = 0"));
}

}  // namespace
}  // namespace dtrain::train
