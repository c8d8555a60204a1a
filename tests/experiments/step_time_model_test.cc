// The predicted step time per codec (experiments/step_time_model.h) against its closed form:
// T = compute + (encode + d decode) + m alpha + B beta, with d and m per exchange.
#include "dtrain/experiments/step_time_model.h"

#include <gtest/gtest.h>

namespace dtrain::experiments {
namespace {

TEST(StepTimeModel, MessagesPerStepFollowTheExchange) {
  // 4 ranks, 3 buckets: ring allreduce 2 (P-1), allgather (P-1), PowerSGD two allreduces.
  EXPECT_EQ(messages_per_step(compress::parse_codec("none"), 4, 3), 18.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("fp16"), 4, 3), 18.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("randomk:0.1"), 4, 3), 18.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("topk:0.01"), 4, 3), 9.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("qsgd:4"), 4, 3), 9.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("powersgd:2"), 4, 3), 36.0);
  EXPECT_EQ(messages_per_step(compress::parse_codec("sign"), 1, 3), 0.0);
}

TEST(StepTimeModel, CastBytesAreTheRingAllreduceOfTheCast) {
  // 2 (P-1)/P x 4n and x 2n: P = 4, n = 1000 -> 6000 and 3000.
  EXPECT_DOUBLE_EQ(cast_bytes_per_step(compress::parse_codec("none"), 4, 1000), 6000.0);
  EXPECT_DOUBLE_EQ(cast_bytes_per_step(compress::parse_codec("fp16"), 4, 1000), 3000.0);
  EXPECT_DOUBLE_EQ(cast_bytes_per_step(compress::parse_codec("bf16"), 2, 1000), 2000.0);
}

TEST(StepTimeModel, PredictionIsComputePlusCodecPlusAlphaBeta) {
  const LinkModel link{10e-6, 1e-9};  // 10 us, 1 GB/s
  const CodecCost cost{2e-3, 1e-3};
  // top-k over 3 ranks, 2 buckets: d = 3 decodes, m = 2 x 2 = 4 messages.
  const StepTimeTerms topk =
      predict_step_time(compress::parse_codec("topk:0.01"), 3, 2, 1e6, 5e-3, cost, link);
  EXPECT_DOUBLE_EQ(topk.compute, 5e-3);
  EXPECT_DOUBLE_EQ(topk.codec, 2e-3 + 3 * 1e-3);
  EXPECT_DOUBLE_EQ(topk.messages, 4.0);
  EXPECT_DOUBLE_EQ(topk.comm, 4 * 10e-6 + 1e6 * 1e-9);
  EXPECT_DOUBLE_EQ(topk.total(), 5e-3 + 5e-3 + 4e-5 + 1e-3);
  // fp16 decodes once (the sum); none has no codec cost whatever the cost given.
  EXPECT_DOUBLE_EQ(
      predict_step_time(compress::parse_codec("fp16"), 3, 2, 1e6, 5e-3, cost, link).codec, 3e-3);
  const StepTimeTerms none =
      predict_step_time(compress::parse_codec("none"), 3, 2, 4e6, 5e-3, cost, link);
  EXPECT_DOUBLE_EQ(none.codec, 0.0);
  EXPECT_DOUBLE_EQ(none.comm, 8 * 10e-6 + 4e6 * 1e-9);
  // Top-k sending 1% of the bytes pays on a slow link (10 ns/byte) and not on a fast one
  // (0.1 ns/byte), where its codec time outweighs what it saves.
  const auto step = [&](const char* codec, double bytes, double beta) {
    return predict_step_time(compress::parse_codec(codec), 3, 2, bytes, 5e-3, cost, {10e-6, beta})
        .total();
  };
  EXPECT_LT(step("topk:0.01", 4e4, 1e-8), step("none", 4e6, 1e-8));
  EXPECT_GT(step("topk:0.01", 4e4, 1e-10), step("none", 4e6, 1e-10));
}

}  // namespace
}  // namespace dtrain::experiments
