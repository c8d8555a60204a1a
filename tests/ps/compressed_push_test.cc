// Compressed parameter-server traffic (ps/compression.h): a push through a lossy codec is applied
// as the codec applied by hand (error feedback's residual on the worker included), fp16 on values
// it represents exactly changes no bit against f32, the bytes of each push and pull equal the
// formula, and the codecs a server cannot use are refused with one line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/compress/codec_spec.h"
#include "dtrain/compress/error_feedback.h"
#include "ps_harness.h"

namespace dtrain::ps {
namespace {

using ::testing::HasSubstr;
using testing::run_ps;
using testing::sgd_options;

// A gradient with a spread of magnitudes (top-k and sign have something to choose).
std::vector<float> gradient(int worker, int step, std::int64_t keys) {
  std::vector<float> g(static_cast<std::size_t>(keys));
  for (std::int64_t i = 0; i < keys; ++i) {
    const auto bits = rng_stream(77, static_cast<std::uint64_t>(worker * 1000 + step),
                                 static_cast<std::uint64_t>(i));
    g[static_cast<std::size_t>(i)] =
        static_cast<float>(static_cast<double>(bits % 20001) / 10000.0 - 1.0);
  }
  return g;
}

Compression compression_of(const std::string& push, const std::string& pull = "none") {
  Compression c;
  c.push = compress::parse_codec(push);
  c.pull = compress::parse_codec(pull);
  c.seed = 12345;
  return c;
}

// The servers' parameters after `steps` pushes of worker 0 (async: each applied as it arrives, SGD
// with lr 1), and the same by hand: encode each shard's gradient (plus the residual) with the seed
// of push_seed, decode, subtract.
void expect_async_pushes_equal_the_codec_by_hand(const std::string& spec, int servers) {
  constexpr std::int64_t kKeys = 203;  // odd: shards of 102 and 101
  constexpr int kSteps = 3;
  ServerOptions options = sgd_options(Consistency::kAsync, kKeys);
  options.compression = compression_of(spec);
  std::vector<float> residual;
  const auto run = run_ps(1, servers, kKeys, options, [&](Client& client, int worker) {
    for (int step = 0; step < kSteps; ++step) {
      const auto g = gradient(worker, step, kKeys);
      client.push({0, kKeys}, g.data(), {step, 1, 1, 1.0});
    }
    residual.assign(client.residual().begin(), client.residual().end());
    client.stop();
  });

  const ShardLayout layout(kKeys, servers);
  const auto codec = compress::make_codec(options.compression.push);
  ASSERT_NE(codec, nullptr);
  compress::ErrorFeedback feedback(kKeys);
  std::vector<float> expected(kKeys, 0.0f);
  for (int step = 0; step < kSteps; ++step) {
    const auto g = gradient(0, step, kKeys);
    for (int s = 0; s < servers; ++s) {
      const KeyRange shard = layout.shard(s);
      const std::int64_t n = shard.size();
      std::vector<std::uint8_t> payload(codec->encoded_bytes(n));
      std::vector<float> sent(static_cast<std::size_t>(n));
      const std::uint64_t seed = push_seed(options.compression.seed, 0, step, s);
      if (options.compression.push.error_feedback) {
        feedback.encode(*codec, shard.begin, g.data() + shard.begin, n, payload.data(), seed,
                        sent.data());
      } else {
        codec->encode(g.data() + shard.begin, n, payload.data(), seed);
      }
      codec->decode(payload.data(), n, sent.data(), seed);
      for (std::int64_t i = 0; i < n; ++i) expected[shard.begin + i] -= sent[i];
    }
  }
  const std::vector<float> got = testing::joined(run);
  ASSERT_EQ(got.size(), expected.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(got[i], expected[i]) << spec << " key " << i;
  }
  if (options.compression.push.error_feedback) {
    ASSERT_EQ(residual.size(), expected.size());
    for (std::size_t i = 0; i < residual.size(); ++i) {
      ASSERT_EQ(residual[i], feedback.residual()[i]) << spec << " residual " << i;
    }
  } else {
    EXPECT_TRUE(residual.empty());
  }
}

TEST(CompressedPush, AsyncServerAppliesTheCodecAppliedByHand) {
  for (const char* spec : {"fp16", "bf16", "sign", "qsgd:4", "topk:0.05", "randomk:0.1"}) {
    for (const int servers : {1, 2}) expect_async_pushes_equal_the_codec_by_hand(spec, servers);
  }
}

TEST(CompressedPush, ErrorFeedbackCanBeTurnedOnAndOff) {
  // topk without error feedback: the worker keeps no residual.
  Compression c = compression_of("topk:0.05");
  c.push.error_feedback = false;
  constexpr std::int64_t kKeys = 50;
  ServerOptions options = sgd_options(Consistency::kAsync, kKeys);
  options.compression = c;
  run_ps(1, 1, kKeys, options, [&](Client& client, int) {
    const auto g = gradient(0, 0, kKeys);
    client.push({0, kKeys}, g.data(), {0, 1, 1, 1.0});
    EXPECT_TRUE(client.residual().empty());
    client.stop();
  });
}

// bsp with 2 workers: each step subtracts decode(worker 0's) + decode(worker 1's) (two terms: the
// sum does not depend on which arrived first).
TEST(CompressedPush, BspSumsTheDecodedPushesOfEveryWorker) {
  constexpr int kWorkers = 2;
  constexpr std::int64_t kKeys = 64;
  constexpr int kSteps = 2;
  ServerOptions options = sgd_options(Consistency::kBsp, kKeys);
  options.compression = compression_of("topk:0.25");
  const auto run = run_ps(kWorkers, 1, kKeys, options, [&](Client& client, int worker) {
    std::vector<float> params(kKeys);
    for (int step = 0; step < kSteps; ++step) {
      const auto g = gradient(worker, step, kKeys);
      client.push({0, kKeys}, g.data(), {step, 1, kWorkers, 1.0}, params.data());
    }
    client.stop();
  });
  const auto codec = compress::make_codec(options.compression.push);
  std::vector<compress::ErrorFeedback> feedback(kWorkers, compress::ErrorFeedback(kKeys));
  std::vector<float> expected(kKeys, 0.0f);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> sum(kKeys, 0.0f);
    for (int w = 0; w < kWorkers; ++w) {
      const auto g = gradient(w, step, kKeys);
      std::vector<std::uint8_t> payload(codec->encoded_bytes(kKeys));
      std::vector<float> sent(kKeys);
      const std::uint64_t seed = push_seed(options.compression.seed, w, step, 0);
      feedback[static_cast<std::size_t>(w)].encode(*codec, 0, g.data(), kKeys, payload.data(), seed,
                                                   sent.data());
      codec->decode(payload.data(), kKeys, sent.data(), seed);
      for (std::int64_t i = 0; i < kKeys; ++i) sum[i] += sent[i];
    }
    for (std::int64_t i = 0; i < kKeys; ++i) expected[i] -= sum[i];
  }
  EXPECT_EQ(testing::joined(run), expected);
}

// Gradients and parameters that fp16 holds exactly (multiples of 1/16 below 2^4): fp16 pushes
// and fp16 pulls give the f32 run bit for bit, bsp over 2 servers and 3 workers.
TEST(CompressedPush, Fp16OnRepresentableValuesEqualsUncompressed) {
  constexpr int kWorkers = 3;
  constexpr std::int64_t kKeys = 37;
  constexpr int kSteps = 3;
  const auto train = [&](const Compression& compression) {
    ServerOptions options = sgd_options(Consistency::kBsp, kKeys);
    options.compression = compression;
    std::vector<std::vector<float>> pulled(kWorkers, std::vector<float>(kKeys));
    const auto run = run_ps(kWorkers, 2, kKeys, options, [&](Client& client, int worker) {
      auto& params = pulled[static_cast<std::size_t>(worker)];
      for (int step = 0; step < kSteps; ++step) {
        std::vector<float> g(kKeys);
        for (std::int64_t i = 0; i < kKeys; ++i) {
          g[static_cast<std::size_t>(i)] =
              static_cast<float>((i * 7 + worker * 3 + step) % 11 - 5) / 8.0f;
        }
        client.push({0, kKeys}, g.data(), {step, 1, kWorkers, 0.5}, params.data());
      }
      client.stop();
    });
    pulled.push_back(testing::joined(run));
    return pulled;
  };
  const auto plain = train(compression_of("none"));
  const auto cast = train(compression_of("fp16", "fp16"));
  EXPECT_EQ(cast, plain);
  EXPECT_NE(plain.back(), std::vector<float>(kKeys, 0.0f));
}

// What a worker sends per push and receives per reply with parameters, against the formula.
TEST(CompressedPush, BytesPerPushAndPullEqualTheFormula) {
  constexpr std::int64_t kKeys = 1001;
  for (const auto& [push, pull] :
       std::vector<std::pair<std::string, std::string>>{{"none", "none"},
                                                        {"topk:0.01", "fp16"},
                                                        {"sign", "bf16"},
                                                        {"qsgd:4", "none"},
                                                        {"randomk:100", "fp16"}}) {
    for (const int servers : {1, 3}) {
      ServerOptions options = sgd_options(Consistency::kAsync, kKeys);
      options.compression = compression_of(push, pull);
      const ShardLayout layout(kKeys, servers);
      run_ps(1, servers, kKeys, options, [&](Client& client, int) {
        std::vector<float> params(kKeys);
        for (int step = 0; step < 3; ++step) {
          const auto g = gradient(0, step, kKeys);
          client.push({0, kKeys}, g.data(), {step, 1, 1, 0.1}, params.data());
        }
        client.pull({0, kKeys}, params.data(), 3);
        EXPECT_EQ(client.pushes(), 3);
        EXPECT_EQ(client.push_bytes(), 3 * predicted_push_bytes(options.compression, layout))
            << push << " over " << servers << " servers";
        EXPECT_EQ(client.param_replies(), 4);
        EXPECT_EQ(client.param_reply_bytes(), 4 * predicted_pull_bytes(options.compression, layout))
            << pull << " over " << servers << " servers";
        client.stop();
      });
      std::int64_t encoded = 0;
      for (int s = 0; s < servers; ++s) {
        encoded += static_cast<std::int64_t>(
            sizeof(RequestHeader) +
            push_payload_bytes(options.compression.push, layout.shard(s).size()));
      }
      EXPECT_EQ(predicted_push_bytes(options.compression, layout), encoded);
    }
  }
  // The closed forms: top-k 1% of 1001 keys over one server keeps k = 10, 8 bytes each.
  EXPECT_EQ(predicted_push_bytes(compression_of("topk:0.01"), ShardLayout(kKeys, 1)),
            static_cast<std::int64_t>(sizeof(RequestHeader)) + 80);
  EXPECT_EQ(predicted_pull_bytes(compression_of("none", "fp16"), ShardLayout(kKeys, 1)),
            static_cast<std::int64_t>(sizeof(ReplyHeader)) + 2002);
}

TEST(CompressedPush, RefusesWhatAServerCannotDecodeOrAPullCannotCarry) {
  EXPECT_THAT([] { check_compression(compression_of("powersgd:2"), "push", "pull"); },
              ::testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("push = \"powersgd:2\""), HasSubstr("one worker's push"))));
  EXPECT_THAT([] { check_compression(compression_of("none", "topk:0.1"), "push", "pull"); },
              ::testing::ThrowsMessage<ConfigError>(
                  AllOf(HasSubstr("pull = \"topk:0.1\""), HasSubstr("none, fp16, bf16"))));
  EXPECT_NO_THROW(check_compression(compression_of("qsgd:8", "bf16"), "push", "pull"));
}

}  // namespace
}  // namespace dtrain::ps
