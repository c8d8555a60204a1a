// Error feedback (error_feedback.h): after each step, residual = (grad + old residual) - sent,
// element for element as float computes it, so sent + residual = grad + old residual; over steps
// everything is sent but the last residual. Ranges of one flat buffer stay apart.
#include "dtrain/compress/error_feedback.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "dtrain/compress/codec_spec.h"
#include "random_values.h"

namespace dtrain::compress {
namespace {

TEST(ErrorFeedback, SentPlusResidualIsInputPlusOldResidual) {
  for (const char* text : {"topk:0.1", "sign", "randomk:0.2", "qsgd:3", "fp16"}) {
    const auto codec = make_codec(parse_codec(text));
    const std::int64_t offset = 5, n = 1003;
    ErrorFeedback feedback(offset + n + 11);
    std::vector<std::uint8_t> payload(codec->encoded_bytes(n));
    std::vector<float> sent(n), total_grad(n, 0.0f), total_sent(n, 0.0f);
    for (int step = 0; step < 5; ++step) {
      const std::vector<float> grad = testing::random_values(n, 100 + step);
      const std::vector<float> old(feedback.residual().begin() + offset,
                                   feedback.residual().begin() + offset + n);
      feedback.encode(*codec, offset, grad.data(), n, payload.data(), step, sent.data());
      std::vector<float> decoded(n);
      codec->decode(payload.data(), n, decoded.data(), step);
      ASSERT_EQ(decoded, sent) << text;  // scratch holds what was sent
      for (std::int64_t i = 0; i < n; ++i) {
        const float compensated = grad[i] + old[i];
        ASSERT_EQ(feedback.residual()[offset + i], compensated - sent[i]) << text << " " << i;
        ASSERT_NEAR(sent[i] + feedback.residual()[offset + i], compensated,
                    0x1.0p-22f * (std::fabs(sent[i]) + std::fabs(compensated)))
            << text;
        total_grad[i] += grad[i];
        total_sent[i] += sent[i];
      }
    }
    // Telescoping: what was sent over the steps plus the last residual is all the gradients.
    for (std::int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(total_sent[i] + feedback.residual()[offset + i], total_grad[i],
                  1e-5 * (1.0 + std::fabs(total_sent[i])))
          << text;
    }
    // Outside the range nothing changed.
    for (std::int64_t i = 0; i < offset; ++i) ASSERT_EQ(feedback.residual()[i], 0.0f);
    for (std::int64_t i = offset + n; i < offset + n + 11; ++i) {
      ASSERT_EQ(feedback.residual()[i], 0.0f);
    }
  }
}

TEST(ErrorFeedback, TopkSendsEverythingEventually) {
  // A constant gradient through top-1 of 4 with error feedback: an element not sent keeps growing
  // in the residual until it is the largest, so every element is sent within a few steps (8).
  const auto codec = make_codec(parse_codec("topk:1"));
  ErrorFeedback feedback(4);
  const std::vector<float> grad = {1.0f, 0.9f, 0.8f, 0.7f};
  std::vector<std::uint8_t> payload(codec->encoded_bytes(4));
  std::vector<float> sent(4);
  std::vector<bool> seen(4, false);
  for (int step = 0; step < 8; ++step) {
    feedback.encode(*codec, 0, grad.data(), 4, payload.data(), 0, sent.data());
    for (int i = 0; i < 4; ++i) seen[i] = seen[i] || sent[i] != 0.0f;
  }
  EXPECT_EQ(seen, std::vector<bool>(4, true));
}

}  // namespace
}  // namespace dtrain::compress
