// Deep Gradient Compression's momentum correction in the compressed reducer
// (reducers/compressed_reducer.h, data_parallel.momentum_correction): every rank's result equals
// the rule done by hand, bit for bit, over a warm-up step and three compressed steps (u = beta u +
// g; the warm-up allreduces u; then u through error feedback and top-k, the sums in rank order,
// and the sent elements' u reset to 0), blocking and async.
#include <gtest/gtest.h>

#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/parallel/reducers/compressed_reducer.h"
#include "random_values.h"
#include "reducer_fixture.h"

namespace dtrain::parallel {
namespace {

constexpr std::uint64_t kSeed = 5;
constexpr float kBeta = 0.9f;
constexpr int kSteps = 4;  // the first one a warm-up

std::vector<float> gradient(int rank, int step, std::int64_t n) {
  // Integers: the warm-up's allreduce sums them exactly in any order.
  std::vector<float> g = testing::random_values(n, 70 + 10 * rank + step);
  for (float& v : g) v = static_cast<float>(static_cast<int>(v * 16.0f));
  return g;
}

TEST(MomentumCorrection, EqualsTheRuleByHand) {
  const std::vector<GradientBucket> buckets = testing::bare_buckets({7, 1000});
  const std::int64_t n = testing::total(buckets);
  const compress::CodecSpec spec = compress::parse_codec("topk:0.1");
  ASSERT_TRUE(spec.error_feedback);
  const auto codec = compress::make_codec(spec);
  for (int ranks : {2, 3}) {
    // By hand.
    std::vector<std::vector<float>> velocity(ranks, std::vector<float>(n, 0.0f));
    std::vector<compress::ErrorFeedback> feedback(ranks, compress::ErrorFeedback(n));
    std::vector<std::vector<float>> want;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> sum(n, 0.0f);
      for (int r = 0; r < ranks; ++r) {
        const std::vector<float> g = gradient(r, step, n);
        std::vector<float>& u = velocity[r];
        for (std::int64_t i = 0; i < n; ++i) u[i] = kBeta * u[i] + g[i];
        if (step == 0) {
          for (std::int64_t i = 0; i < n; ++i) sum[i] += u[i];
          continue;
        }
        for (std::size_t b = 0; b < buckets.size(); ++b) {
          const GradientBucket& bucket = buckets[b];
          std::vector<std::uint8_t> payload(codec->encoded_bytes(bucket.count));
          std::vector<float> sent(bucket.count);
          const std::uint64_t seed = codec_seed(kSeed, b, step - 1, r);
          feedback[r].encode(*codec, bucket.offset, u.data() + bucket.offset, bucket.count,
                             payload.data(), seed, sent.data());
          for (std::int64_t i = 0; i < bucket.count; ++i) {
            if (sent[i] != 0.0f) u[bucket.offset + i] = 0.0f;
          }
          codec->decode_add(payload.data(), bucket.count, sum.data() + bucket.offset, seed);
        }
      }
      want.push_back(sum);
    }
    // The reducer.
    for (bool async : {false, true}) {
      comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
        auto model = testing::small_mlp();
        auto reducer = compressed_reducer(spec, kSeed, /*warmup_steps=*/1,
                                          kBeta)(ReducerContext{comm, *model, buckets, {}});
        for (int step = 0; step < kSteps; ++step) {
          std::vector<float> grads = gradient(comm.rank(), step, n);
          std::vector<comm::Work> works;
          for (const GradientBucket& b : buckets) {
            if (async) {
              works.push_back(reducer->reduce_async(b, grads.data() + b.offset));
            } else {
              reducer->reduce(b, grads.data() + b.offset);
            }
          }
          for (const comm::Work& w : works) w.wait(std::chrono::seconds(60));
          ASSERT_EQ(grads, want[step]) << "P=" << ranks << " step " << step << " async " << async;
        }
      });
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
