// Deep Gradient Compression's momentum correction in the compressed reducer
// (reducers/compressed_reducer.h, data_parallel.momentum_correction): every rank's result equals
// the rule done by hand, bit for bit, over a warm-up step and three compressed steps (u = beta u +
// g; the warm-up allreduces u; then u through error feedback and top-k, the sums in rank order,
// and the sent elements' u reset to 0), blocking and async. PowerSGD's form, on a model's tensors:
// u through error feedback and the factors, each matrix's u without its part in the span of the
// step's P^ (u -= P^ P^T u, done here with loops in double), the tensors sent exactly reset to 0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/compress/error_feedback.h"
#include "dtrain/compress/powersgd.h"
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

// u -= P (P^T u) for u (rows x cols) and P (rows x rank), row-major, in double.
void project_out_by_hand(const float* p, std::int64_t rows, std::int64_t cols, int rank, float* u) {
  for (std::int64_t c = 0; c < cols; ++c) {
    std::vector<double> dot(static_cast<std::size_t>(rank), 0.0);
    for (int k = 0; k < rank; ++k) {
      for (std::int64_t r = 0; r < rows; ++r) dot[k] += double{p[r * rank + k]} * u[r * cols + c];
    }
    for (std::int64_t r = 0; r < rows; ++r) {
      double sum = 0.0;
      for (int k = 0; k < rank; ++k) sum += double{p[r * rank + k]} * dot[k];
      u[r * cols + c] = static_cast<float>(u[r * cols + c] - sum);
    }
  }
}

TEST(MomentumCorrection, PowerSgdMasksTheSubspaceSent) {
  const compress::CodecSpec spec = compress::parse_codec("powersgd:2");
  ASSERT_TRUE(spec.error_feedback);
  auto model = testing::small_mlp();  // 7 x 12 and 5 x 7 compressed, 3 x 5 and biases exact
  const auto& entries = model->store().param_entries();
  const std::vector<GradientBucket> buckets =
      make_gradient_buckets(entries, model->param_layer(), 1 << 20);  // one bucket
  ASSERT_EQ(buckets.size(), 1u);
  const std::int64_t n = buckets[0].count;
  for (int ranks : {2, 3}) {
    // By hand: twins per (rank, matrix), seeded as the reducer seeds its pieces.
    std::vector<std::vector<std::unique_ptr<compress::PowerSgd>>> twins(ranks);
    int compressed = 0;
    for (int r = 0; r < ranks; ++r) {
      std::uint64_t piece = 0;
      for (const nn::ParamEntry& e : entries) {
        const bool matrix = e.shape.size() == 2 && 2 * (e.shape[0] + e.shape[1]) < e.numel;
        twins[r].push_back(matrix ? std::make_unique<compress::PowerSgd>(
                                        compress::LowRankShape{e.shape[0], e.shape[1]}, 2,
                                        codec_seed(kSeed, 0, 0, -1) + piece++)
                                  : nullptr);
        if (r == 0 && matrix) ++compressed;
      }
    }
    ASSERT_EQ(compressed, 2);
    std::vector<std::vector<float>> velocity(ranks, std::vector<float>(n, 0.0f));
    std::vector<compress::ErrorFeedback> feedback(ranks, compress::ErrorFeedback(n));
    std::vector<std::vector<float>> want;
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> sum(n, 0.0f);
      std::vector<const float*> m(ranks);
      for (int r = 0; r < ranks; ++r) {
        const std::vector<float> g = gradient(r, step, n);
        for (std::int64_t i = 0; i < n; ++i) velocity[r][i] = kBeta * velocity[r][i] + g[i];
        if (step == 0) {
          for (std::int64_t i = 0; i < n; ++i) sum[i] += velocity[r][i];
        } else {
          m[r] = feedback[r].compensate(0, velocity[r].data(), n);
        }
      }
      if (step > 0) {
        std::vector<float> sent(n);
        std::vector<std::vector<float>> local(ranks, std::vector<float>(n));
        for (std::size_t t = 0; t < entries.size(); ++t) {
          const nn::ParamEntry& e = entries[t];
          if (!twins[0][t]) {  // exact: the sum, nothing left over, u restarts
            for (int r = 0; r < ranks; ++r) {
              for (std::int64_t i = 0; i < e.numel; ++i) {
                sum[e.offset + i] += m[r][e.offset + i];
                local[r][e.offset + i] = m[r][e.offset + i];
                velocity[r][e.offset + i] = 0.0f;
              }
            }
            continue;
          }
          const std::int64_t pc = twins[0][t]->p_count(), qc = twins[0][t]->q_count();
          std::vector<float> p_sum(pc, 0.0f), q_sum(qc, 0.0f);
          for (int r = 0; r < ranks; ++r) {
            twins[r][t]->compute_p(m[r] + e.offset);
            for (std::int64_t i = 0; i < pc; ++i) p_sum[i] += twins[r][t]->p()[i];
          }
          for (int r = 0; r < ranks; ++r) {
            std::copy(p_sum.begin(), p_sum.end(), twins[r][t]->p());
            twins[r][t]->orthogonalize();
            twins[r][t]->compute_q();
            twins[r][t]->decode(local[r].data() + e.offset);
            project_out_by_hand(twins[r][t]->p(), e.shape[0], e.shape[1], 2,
                                velocity[r].data() + e.offset);
            for (std::int64_t i = 0; i < qc; ++i) q_sum[i] += twins[r][t]->q()[i];
          }
          for (int r = 0; r < ranks; ++r) std::copy(q_sum.begin(), q_sum.end(), twins[r][t]->q());
          twins[0][t]->decode(sum.data() + e.offset);
        }
        for (int r = 0; r < ranks; ++r) feedback[r].settle(0, local[r].data(), n);
      }
      want.push_back(sum);
    }
    // The reducer.
    for (bool async : {false, true}) {
      comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
        auto reducer = compressed_reducer(spec, kSeed, /*warmup_steps=*/1,
                                          kBeta)(ReducerContext{comm, *model, buckets, {}});
        for (int step = 0; step < kSteps; ++step) {
          std::vector<float> grads = gradient(comm.rank(), step, n);
          if (async) {
            reducer->reduce_async(buckets[0], grads.data()).wait(std::chrono::seconds(60));
          } else {
            reducer->reduce(buckets[0], grads.data());
          }
          for (std::int64_t i = 0; i < n; ++i) {
            ASSERT_NEAR(grads[i], want[step][i], 1e-4 * (1.0 + std::fabs(want[step][i])))
                << "P=" << ranks << " step " << step << " element " << i << " async " << async;
          }
        }
      });
    }
  }
}

}  // namespace
}  // namespace dtrain::parallel
