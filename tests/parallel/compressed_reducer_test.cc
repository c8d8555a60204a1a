// The compressed reducer (reducers/compressed_reducer.h), ranks as threads, P = 1..5, buckets of
// odd sizes: every rank's result equals the same codec applied by hand (each rank's gradient
// encoded with its error feedback, the payloads decoded and summed in rank order) over two steps,
// bit for bit, blocking and async; the bytes the communicator counts are the codec's declared
// sizes times the collective's formula; fp16 on values it represents equals the plain allreduce;
// PowerSGD equals its steps done by hand (to rounding: the ring sums in another order).
#include "dtrain/parallel/reducers/compressed_reducer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "dtrain/comm/algorithms/blocks.h"
#include "dtrain/comm/spawn_ranks.h"
#include "dtrain/nn/model_zoo.h"
#include "dtrain/parallel/gradient_synchronizer.h"
#include "dtrain/parallel/reducers/allreduce_reducer.h"
#include "random_values.h"
#include "reducer_fixture.h"

namespace dtrain::parallel {
namespace {

constexpr std::uint64_t kSeed = 2024;

using testing::small_mlp;
using testing::total;

// Buckets of 1, 7, 1000 and 4099 elements over one flat buffer (the reducer needs only ranges).
std::vector<GradientBucket> odd_buckets() { return testing::bare_buckets({1, 7, 1000, 4099}); }

// Rank r's gradient at a step. Integers in [-16, 16] when `integers` (sums over 5 ranks are exact
// in f32, f16 and bf16 in any order), else uniform values.
std::vector<float> gradient(int rank, int step, std::int64_t n, bool integers) {
  std::vector<float> g = testing::random_values(n, 1000 + 10 * rank + step);
  if (integers) {
    for (float& v : g) v = std::round(v * 16.0f);
  }
  return g;
}

// Runs `steps` steps of the reducer on every rank; returns each rank's buffers after each step.
std::vector<std::vector<std::vector<float>>> run_reducer(const ReducerFactory& factory, int ranks,
                                                         int steps, bool integers, bool async) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  std::vector<std::vector<std::vector<float>>> results(static_cast<std::size_t>(ranks));
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    auto reducer = factory(ReducerContext{comm, *model, buckets, {}});
    for (int step = 0; step < steps; ++step) {
      std::vector<float> grads = gradient(comm.rank(), step, total(buckets), integers);
      std::vector<comm::Work> works;
      for (const GradientBucket& b : buckets) {
        if (async) {
          works.push_back(reducer->reduce_async(b, grads.data() + b.offset));
        } else {
          reducer->reduce(b, grads.data() + b.offset);
        }
      }
      for (const comm::Work& w : works) w.wait(std::chrono::seconds(60));
      results[static_cast<std::size_t>(comm.rank())].push_back(grads);
    }
  });
  return results;
}

// The codec by hand: P ranks' error feedback, each rank's payload, decoded and summed in rank
// order (summable codecs: the payloads' decodes summed, which integer inputs make exact).
std::vector<std::vector<float>> by_hand(const compress::CodecSpec& spec, int ranks, int steps,
                                        bool integers) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  const auto codec = compress::make_codec(spec);
  const bool gather = codec->exchange() == compress::Exchange::kGather;
  std::vector<compress::ErrorFeedback> feedback(static_cast<std::size_t>(ranks),
                                                compress::ErrorFeedback(total(buckets)));
  std::vector<std::vector<float>> sums;
  for (int step = 0; step < steps; ++step) {
    std::vector<float> sum(static_cast<std::size_t>(total(buckets)), 0.0f);
    for (int r = 0; r < ranks; ++r) {
      const std::vector<float> g = gradient(r, step, total(buckets), integers);
      for (std::size_t b = 0; b < buckets.size(); ++b) {
        const GradientBucket& bucket = buckets[b];
        const std::uint64_t seed = codec_seed(kSeed, b, step, gather ? r : -1);
        std::vector<std::uint8_t> payload(codec->encoded_bytes(bucket.count));
        std::vector<float> sent(static_cast<std::size_t>(bucket.count));
        if (spec.error_feedback) {
          feedback[static_cast<std::size_t>(r)].encode(*codec, bucket.offset,
                                                       g.data() + bucket.offset, bucket.count,
                                                       payload.data(), seed, sent.data());
        } else {
          codec->encode(g.data() + bucket.offset, bucket.count, payload.data(), seed);
        }
        codec->decode_add(payload.data(), bucket.count, sum.data() + bucket.offset, seed);
      }
    }
    sums.push_back(sum);
  }
  return sums;
}

class CompressedReducerSweep : public ::testing::TestWithParam<std::tuple<const char*, int, bool>> {
};

TEST_P(CompressedReducerSweep, EqualsTheCodecAppliedByHand) {
  const auto [text, ranks, async] = GetParam();
  const compress::CodecSpec spec = compress::parse_codec(text);
  // Summable codecs are summed by the allreduce in its own order: integers keep that exact.
  const bool integers = spec.exchange() == compress::Exchange::kSummable;
  const auto results = run_reducer(compressed_reducer(spec, kSeed), ranks, 2, integers, async);
  const auto expected = by_hand(spec, ranks, 2, integers);
  for (int r = 0; r < ranks; ++r) {
    for (int step = 0; step < 2; ++step) {
      const auto& got = results[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)];
      const auto& want = expected[static_cast<std::size_t>(step)];
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(got[i], want[i])
            << text << " P=" << ranks << " rank " << r << " step " << step << " element " << i;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(CodecsRanksAsync, CompressedReducerSweep,
                         ::testing::Combine(::testing::Values("topk:0.1", "topk:3", "sign",
                                                              "qsgd:4", "qsgd:8", "randomk:0.3",
                                                              "fp16", "bf16"),
                                            ::testing::Values(1, 2, 3, 4, 5), ::testing::Bool()));

// Ring's bytes sent by `rank` for an allreduce of `count` elements of `size` bytes
// (tests/comm/comm_stats_test.cc): size x (2 count - |block rank| - |block rank + 1|).
std::int64_t ring_allreduce_bytes(std::int64_t count, std::int64_t size, int ranks, int rank) {
  if (ranks == 1) return 0;
  return size * (2 * count - comm::block_size(count, ranks, rank) -
                 comm::block_size(count, ranks, (rank + 1) % ranks));
}

// What each rank's communicator counted under `op` after one step of `spec`.
std::vector<comm::OpStats> step_stats(const compress::CodecSpec& spec, int ranks, const char* op) {
  const std::vector<GradientBucket> buckets = odd_buckets();
  std::vector<comm::OpStats> stats(static_cast<std::size_t>(ranks));
  comm::spawn_ranks(ranks, [&](comm::Communicator& comm) {
    auto model = small_mlp();
    auto reducer = compressed_reducer(spec, kSeed)(ReducerContext{comm, *model, buckets, {}});
    std::vector<float> grads = gradient(comm.rank(), 0, total(buckets), false);
    for (const GradientBucket& b : buckets) reducer->reduce(b, grads.data() + b.offset);
    stats[static_cast<std::size_t>(comm.rank())] = comm.stats().get(op);
  });
  return stats;
}

TEST(CompressedReducer, GatherCodecsSendPMinusOnePayloadsPerRank) {
  for (const char* text : {"topk:0.01", "sign", "qsgd:5"}) {
    const compress::CodecSpec spec = compress::parse_codec(text);
    const auto codec = compress::make_codec(spec);
    for (int ranks : {2, 3, 5}) {
      std::int64_t payloads = 0;
      for (const GradientBucket& b : odd_buckets()) {
        payloads += static_cast<std::int64_t>(codec->encoded_bytes(b.count));
      }
      for (const comm::OpStats& s : step_stats(spec, ranks, "allgather")) {
        EXPECT_EQ(s.bytes_sent, (ranks - 1) * payloads) << text << " P=" << ranks;
        EXPECT_EQ(s.calls, 4);
      }
    }
  }
}

TEST(CompressedReducer, SummableCodecsSendTheRingAllreduceOfTheirPayload) {
  for (const char* text : {"fp16", "bf16", "randomk:0.1"}) {
    const compress::CodecSpec spec = compress::parse_codec(text);
    const auto codec = compress::make_codec(spec);
    const auto size = static_cast<std::int64_t>(dtype_size(codec->wire_dtype()));
    for (int ranks : {2, 3, 5}) {
      const auto stats = step_stats(spec, ranks, "allreduce");
      for (int r = 0; r < ranks; ++r) {
        std::int64_t expected = 0;
        for (const GradientBucket& b : odd_buckets()) {
          expected += ring_allreduce_bytes(codec->wire_count(b.count), size, ranks, r);
        }
        EXPECT_EQ(stats[static_cast<std::size_t>(r)].bytes_sent, expected)
            << text << " P=" << ranks << " rank " << r;
      }
    }
  }
}

TEST(CompressedReducer, PowerSgdSendsTwoAllreducesOfItsFactors) {
  const compress::CodecSpec spec = compress::parse_codec("powersgd:2");
  for (int ranks : {2, 3, 5}) {
    const auto stats = step_stats(spec, ranks, "allreduce");
    for (int r = 0; r < ranks; ++r) {
      std::int64_t expected = 0;
      for (const GradientBucket& b : odd_buckets()) {
        const compress::LowRankShape shape = compress::LowRankShape::of(b.count);
        if (2 * (shape.rows + shape.cols) < b.count) {
          expected += ring_allreduce_bytes(2 * shape.rows, 4, ranks, r) +
                      ring_allreduce_bytes(2 * shape.cols, 4, ranks, r);
        } else {  // too small to gain: the plain f32 allreduce
          expected += ring_allreduce_bytes(b.count, 4, ranks, r);
        }
      }
      EXPECT_EQ(stats[static_cast<std::size_t>(r)].bytes_sent, expected) << "P=" << ranks;
    }
  }
}

TEST(CompressedReducer, Fp16OnRepresentableValuesEqualsThePlainAllreduce) {
  for (int ranks = 1; ranks <= 5; ++ranks) {
    const auto fp16 = run_reducer(compressed_reducer(compress::parse_codec("fp16")), ranks, 1,
                                  /*integers=*/true, /*async=*/true);
    const auto plain = run_reducer(allreduce_reducer(), ranks, 1, /*integers=*/true,
                                   /*async=*/true);
    EXPECT_EQ(fp16, plain) << "P=" << ranks;
  }
}

TEST(CompressedReducer, PowerSgdEqualsItsStepsByHand) {
  const compress::CodecSpec spec = compress::parse_codec("powersgd:2");
  const std::vector<GradientBucket> buckets = odd_buckets();
  for (int ranks = 1; ranks <= 4; ++ranks) {
    for (bool async : {false, true}) {
      const auto results = run_reducer(compressed_reducer(spec, kSeed), ranks, 2, false, async);
      // By hand: one PowerSgd per (rank, bucket), all started from the same Q; the sums in rank
      // order, where the reducer's ring sums in its own order (hence the tolerance).
      std::vector<compress::ErrorFeedback> feedback(static_cast<std::size_t>(ranks),
                                                    compress::ErrorFeedback(total(buckets)));
      std::vector<std::vector<std::unique_ptr<compress::PowerSgd>>> power(
          static_cast<std::size_t>(ranks));
      for (int r = 0; r < ranks; ++r) {
        for (std::size_t b = 0; b < buckets.size(); ++b) {
          const compress::LowRankShape shape = compress::LowRankShape::of(buckets[b].count);
          const bool pays = 2 * (shape.rows + shape.cols) < buckets[b].count;
          power[static_cast<std::size_t>(r)].push_back(
              pays ? std::make_unique<compress::PowerSgd>(buckets[b].count, 2,
                                                          codec_seed(kSeed, b, 0, -1))
                   : nullptr);
        }
      }
      for (int step = 0; step < 2; ++step) {
        std::vector<std::vector<float>> g;
        for (int r = 0; r < ranks; ++r) g.push_back(gradient(r, step, total(buckets), false));
        std::vector<float> want(static_cast<std::size_t>(total(buckets)), 0.0f);
        for (std::size_t b = 0; b < buckets.size(); ++b) {
          const GradientBucket& bucket = buckets[b];
          if (!power[0][b]) {  // allreduced in f32
            for (int r = 0; r < ranks; ++r) {
              for (std::int64_t i = 0; i < bucket.count; ++i) {
                want[bucket.offset + i] += g[r][bucket.offset + i];
              }
            }
            continue;
          }
          std::vector<const float*> m;
          for (int r = 0; r < ranks; ++r) {
            m.push_back(
                feedback[r].compensate(bucket.offset, g[r].data() + bucket.offset, bucket.count));
            power[r][b]->compute_p(m[r]);
          }
          const std::int64_t pc = power[0][b]->p_count(), qc = power[0][b]->q_count();
          std::vector<float> p_sum(pc, 0.0f), q_sum(qc, 0.0f);
          for (int r = 0; r < ranks; ++r) {
            for (std::int64_t i = 0; i < pc; ++i) p_sum[i] += power[r][b]->p()[i];
          }
          std::vector<float> local(static_cast<std::size_t>(bucket.count));
          for (int r = 0; r < ranks; ++r) {
            std::copy(p_sum.begin(), p_sum.end(), power[r][b]->p());
            power[r][b]->orthogonalize();
            power[r][b]->compute_q();
            power[r][b]->decode(local.data());
            feedback[r].settle(bucket.offset, local.data(), bucket.count);
            for (std::int64_t i = 0; i < qc; ++i) q_sum[i] += power[r][b]->q()[i];
          }
          for (int r = 0; r < ranks; ++r) std::copy(q_sum.begin(), q_sum.end(), power[r][b]->q());
          power[0][b]->decode(want.data() + bucket.offset);
        }
        for (int r = 0; r < ranks; ++r) {
          const auto& got = results[static_cast<std::size_t>(r)][static_cast<std::size_t>(step)];
          for (std::size_t i = 0; i < want.size(); ++i) {
            ASSERT_NEAR(got[i], want[i], 1e-4 * (1.0 + std::fabs(want[i])))
                << "P=" << ranks << " rank " << r << " step " << step << " element " << i;
          }
          // Every rank holds the same numbers.
          EXPECT_EQ(got, results[0][static_cast<std::size_t>(step)]);
        }
      }
    }
  }
}

// Buckets made of a model's tensors: PowerSGD compresses each weight matrix in its own shape
// (rows = dim 0) and sends vectors exactly, as PyTorch's PowerSGD hook does. One rank: each
// matrix's result is P^ P^T M of that matrix alone (PowerSgd::compress), each bias unchanged.
TEST(CompressedReducer, PowerSgdCompressesEachWeightMatrixInItsOwnShape) {
  const compress::CodecSpec spec = compress::parse_codec("powersgd:2");
  auto model = small_mlp();
  const auto& entries = model->store().param_entries();
  const std::vector<GradientBucket> buckets =
      make_gradient_buckets(entries, model->param_layer(), 1 << 20);  // one bucket
  ASSERT_EQ(buckets.size(), 1u);
  const std::int64_t n = buckets[0].count;
  comm::spawn_ranks(1, [&](comm::Communicator& comm) {
    auto reducer = compressed_reducer(spec, kSeed)(ReducerContext{comm, *model, buckets, {}});
    // Hand-made twins, seeded as the reducer seeds its pieces (in entry order, matrices only).
    std::vector<std::unique_ptr<compress::PowerSgd>> twins;
    std::uint64_t piece = 0;
    for (const nn::ParamEntry& entry : entries) {
      const bool matrix = entry.shape.size() == 2 &&
                          2 * (entry.shape[0] + entry.shape[1]) < entry.numel &&
                          std::min(entry.shape[0], entry.shape[1]) >= 2;
      twins.push_back(matrix ? std::make_unique<compress::PowerSgd>(
                                   compress::LowRankShape{entry.shape[0], entry.shape[1]}, 2,
                                   codec_seed(kSeed, 0, 0, -1) + piece++)
                             : nullptr);
    }
    compress::ErrorFeedback feedback(n);
    for (int step = 0; step < 3; ++step) {
      std::vector<float> grads = gradient(0, step, n, false);
      std::vector<float> want(grads.size());
      const float* m = feedback.compensate(0, grads.data(), n);
      std::vector<float> sent(grads.size());
      for (std::size_t e = 0; e < entries.size(); ++e) {
        const nn::ParamEntry& entry = entries[e];
        if (twins[e]) {
          twins[e]->compress(m + entry.offset, want.data() + entry.offset);
        } else {
          std::copy_n(m + entry.offset, entry.numel, want.data() + entry.offset);
        }
      }
      std::copy(want.begin(), want.end(), sent.begin());
      feedback.settle(0, sent.data(), n);
      reducer->reduce(buckets[0], grads.data());
      for (std::size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(grads[i], want[i], 1e-5 * (1.0 + std::fabs(want[i])))
            << "step " << step << " element " << i;
      }
    }
  });
}

// compression_warmup_steps: the first exchanges of each bucket are the plain f32 sums.
TEST(CompressedReducer, WarmupStepsAreExactAllreduces) {
  for (const char* text : {"topk:0.01", "powersgd:2", "fp16"}) {
    const compress::CodecSpec spec = compress::parse_codec(text);
    for (bool async : {false, true}) {
      const auto warm = run_reducer(compressed_reducer(spec, kSeed, 2), 3, 2, true, async);
      const auto plain = run_reducer(allreduce_reducer(), 3, 2, true, async);
      const auto cold = run_reducer(compressed_reducer(spec, kSeed), 3, 1, true, async);
      for (int r = 0; r < 3; ++r) {
        for (int step = 0; step < 2; ++step) {
          EXPECT_EQ(warm[r][step], plain[r][step]) << text << " step " << step;
        }
      }
      // Without warm-up the codec runs at once (fp16 of these integers is exact: no difference).
      if (spec.kind != compress::CodecKind::kFp16) {
        EXPECT_NE(cold[0][0], plain[0][0]) << text;
      }
    }
  }
}

TEST(CompressedReducer, ThroughTheSynchronizerOverlapChangesNoBit) {
  for (const char* text : {"topk:0.2", "qsgd:6", "fp16", "powersgd:1"}) {
    std::vector<std::vector<float>> by_overlap;
    for (bool overlap : {false, true}) {
      std::vector<float> rank0;
      comm::spawn_ranks(3, [&](comm::Communicator& comm) {
        auto model = small_mlp();
        DataParallelOptions options;
        options.fusion_bytes = 64;
        options.overlap = overlap;
        options.reducer = compressed_reducer(compress::parse_codec(text), kSeed);
        GradientSynchronizer sync(comm, *model, options);
        nn::ParamStore& store = model->store();
        for (int step = 0; step < 3; ++step) {
          const auto g = gradient(comm.rank(), step, store.num_params(), false);
          std::copy(g.begin(), g.end(), store.grads());
          sync.begin_step();
          for (std::size_t layer = model->layers().size(); layer-- > 0;) sync.on_layer_done(layer);
          sync.finish();
        }
        if (comm.rank() == 0) rank0.assign(store.grads(), store.grads() + store.num_params());
      });
      by_overlap.push_back(rank0);
    }
    EXPECT_EQ(by_overlap[0], by_overlap[1]) << text;
  }
}

}  // namespace
}  // namespace dtrain::parallel
