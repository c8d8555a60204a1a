// data_parallel.bucket_bytes = "auto" buckets for overlap when overlapping and fuses everything
// into one bucket when not; a byte count is obeyed.
#include "dtrain/train/strategies/data_parallel/fusion_policy.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dtrain::train {
namespace {

using ::testing::HasSubstr;

TEST(FusionPolicy, AutoBucketsForOverlapAndFusesEverythingWithout) {
  const FusionDecision overlapping = decide_fusion_bytes("auto", true, 1077288);
  EXPECT_EQ(overlapping.bytes, kOverlapBucketBytes);
  EXPECT_THAT(overlapping.reason, HasSubstr("auto: overlap on"));
  const FusionDecision serial = decide_fusion_bytes("auto", false, 1077288);
  EXPECT_EQ(serial.bytes, 1077288);  // every gradient fits one bucket
  EXPECT_THAT(serial.reason, HasSubstr("one bucket (auto: no overlap)"));
}

TEST(FusionPolicy, ByteCountsAreObeyed) {
  EXPECT_EQ(decide_fusion_bytes("0", false, 1000).bytes, 0);
  EXPECT_THAT(decide_fusion_bytes("0", false, 1000).reason, HasSubstr("per tensor"));
  EXPECT_EQ(decide_fusion_bytes("256", true, 1000).bytes, 256);
  EXPECT_EQ(decide_fusion_bytes("16777216", false, 1000).bytes, 16777216);
}

}  // namespace
}  // namespace dtrain::train
