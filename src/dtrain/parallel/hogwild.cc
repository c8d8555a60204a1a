#include "dtrain/parallel/hogwild.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/parallel/hogwild_threads.h"

namespace dtrain::parallel {
namespace {

using hogwild_detail::mean_over_threads;
using hogwild_detail::part_begin;
using hogwild_detail::run_on_threads;
using hogwild_detail::thread_cpu_seconds;
using Weight = std::atomic_ref<float>;
// Samples between the first prefetch for a sample and its update.
constexpr std::int64_t kPrefetchDistance = 8;
// Samples a thread claims at a time: one shared counter increment per ~100 us of updates.
constexpr std::int64_t kChunk = 1024;
static_assert(Weight::is_always_lock_free,
              "Hogwild! needs lock-free atomic floats: a lock per access would serialise it");

// Sequential SGD over `order`: the loop every thread runs on each chunk it takes.
void sgd_over(std::span<const std::int64_t> order, const SparseRecords& records, float* w,
              LinearLoss loss, float lr, float l2) {
  const std::int64_t* starts = records.starts();
  const SparseEntry* entries = records.entries();
  const auto n = static_cast<std::int64_t>(order.size());
  for (std::int64_t next = 0; next < n; ++next) {
    // The order is random, so every sample's start and record are cache misses (the data set is
    // larger than the caches); prefetching them ahead in three stages (its start 8 samples ahead,
    // its record's lines 4, its weights 2) overlaps those misses with the current sample's work.
    // Prefetches change no value.
    if (next + kPrefetchDistance < n) {
      __builtin_prefetch(starts + order[static_cast<std::size_t>(next + kPrefetchDistance)]);
    }
    if (next + kPrefetchDistance / 2 < n) {
      const std::int64_t ahead = order[static_cast<std::size_t>(next + kPrefetchDistance / 2)];
      for (std::int64_t p = starts[ahead]; p < starts[ahead + 1];
           p += SparseRecords::kEntriesPerLine) {
        __builtin_prefetch(entries + p);
      }
    }
    if (next + kPrefetchDistance / 4 < n) {
      // The weights the sample after next touches, for writing (its record arrived meanwhile).
      const SparseEntry* ahead =
          records.record(order[static_cast<std::size_t>(next + kPrefetchDistance / 4)]);
      for (std::int32_t p = 1; p <= ahead[0].column; ++p) {
        __builtin_prefetch(w + ahead[p].column, 1);
      }
    }
    const SparseEntry* record = records.record(order[static_cast<std::size_t>(next)]);
    const std::int32_t count = record[0].column;
    const float y = record[0].value;
    float z = 0.0f;
    for (std::int32_t p = 1; p <= count; ++p) {
      z += Weight(w[record[p].column]).load(std::memory_order_relaxed) * record[p].value;
    }
    const float g = y * linear_loss_derivative(loss, y * z);
    if (g == 0.0f && l2 == 0.0f) continue;
    for (std::int32_t p = 1; p <= count; ++p) {
      // Load and store, not fetch_add: a write of another thread in between is lost (allowed).
      Weight wj(w[record[p].column]);
      const float old = wj.load(std::memory_order_relaxed);
      wj.store(old - lr * (g * record[p].value + l2 * old), std::memory_order_relaxed);
    }
  }
}

}  // namespace

LinearLoss linear_loss_from_name(const std::string& name) {
  if (name == "logistic") return LinearLoss::kLogistic;
  if (name == "svm" || name == "hinge") return LinearLoss::kHinge;
  throw ConfigError(
      fmt::format("unknown linear model loss '{}'; accepted: \"logistic\", \"svm\" (hinge)", name));
}

const char* linear_loss_name(LinearLoss loss) {
  return loss == LinearLoss::kLogistic ? "logistic" : "svm";
}

double linear_loss(LinearLoss loss, double margin) {
  if (loss == LinearLoss::kHinge) return std::max(0.0, 1.0 - margin);
  // log(1 + exp(-m)) without overflow for large |m|.
  return margin >= 0.0 ? std::log1p(std::exp(-margin)) : -margin + std::log1p(std::exp(margin));
}

float linear_loss_derivative(LinearLoss loss, float margin) {
  if (loss == LinearLoss::kHinge) return margin < 1.0f ? -1.0f : 0.0f;
  // -sigmoid(-m) = -1 / (1 + exp(m)); exp overflowing to inf gives -0, the right limit.
  return -1.0f / (1.0f + std::exp(margin));
}

Hogwild::Hogwild(const data::SparseDataset& train, HogwildOptions options)
    : train_(train), options_(options), records_(train) {
  if (options_.threads < 1) {
    throw ConfigError(fmt::format("Hogwild!: threads must be >= 1, got {}", options_.threads));
  }
  if (!std::isfinite(options_.l2) || options_.l2 < 0.0f) {
    throw ConfigError(fmt::format("Hogwild!: l2 must be finite and >= 0, got {}", options_.l2));
  }
  for (std::int64_t i = 0; i < train.size(); ++i) {
    const float y = train.labels[static_cast<std::size_t>(i)];
    if (y != 1.0f && y != -1.0f) {
      throw ConfigError(fmt::format(
          "Hogwild!: {} sample {} has label {}; labels must be -1 or +1 (data::make_binary_labels)",
          train.name, i, y));
    }
  }
  weights_.assign(static_cast<std::size_t>(train.num_features), 0.0f);
}

HogwildEpoch Hogwild::run_epoch(std::int64_t epoch, float lr, std::int64_t start,
                                const HogwildPause* pause) {
  DTRAIN_CHECK(lr > 0.0f && std::isfinite(lr), "learning rate {}", lr);
  const int threads = options_.threads;
  // The shuffle is serial and outside the timed part: O(N) draws, a few ms per million samples.
  const std::vector<std::int64_t> order =
      data::ShuffledSampler(train_.size(), options_.seed, options_.shuffle).epoch_order(epoch);
  const std::int64_t n = static_cast<std::int64_t>(order.size());
  DTRAIN_CHECK(start >= 0 && start <= n, "start position {} of an epoch of {}", start, n);
  HogwildEpoch result;
  result.thread_updates.assign(static_cast<std::size_t>(threads), 0);
  result.thread_cpu_seconds.assign(static_cast<std::size_t>(threads), 0.0);
  float* w = weights_.data();
  hogwild_detail::ChunkCounter chunks(n, kChunk, start);
  hogwild_detail::PauseMeeting meeting(
      threads, pause != nullptr ? pause->timeout : std::chrono::milliseconds(0));
  hogwild_detail::EpochEnd end;
  const auto begin = std::chrono::steady_clock::now();
  end.began = begin;
  run_on_threads(threads, [&](int t) {
    const double cpu_start = thread_cpu_seconds();
    const std::int64_t done = hogwild_detail::train_chunks(
        t, chunks, meeting, pause, end, [&](const hogwild_detail::ChunkCounter::Range& chunk) {
          sgd_over(
              std::span<const std::int64_t>(order).subspan(static_cast<std::size_t>(chunk.begin),
                                                           static_cast<std::size_t>(chunk.size())),
              records_, w, options_.loss, lr, options_.l2);
        });
    result.thread_updates[static_cast<std::size_t>(t)] = done;
    result.thread_cpu_seconds[static_cast<std::size_t>(t)] = thread_cpu_seconds() - cpu_start;
  });
  result.finish(begin, end.stopped.load(std::memory_order_relaxed), end.position, start, n);
  return result;
}

LinearEvaluation Hogwild::evaluate(const data::SparseDataset& data) const {
  const std::int64_t n = data.size();
  const int threads =
      static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(options_.threads, n)));
  std::vector<double> losses(static_cast<std::size_t>(threads), 0.0);
  std::vector<std::int64_t> correct(static_cast<std::size_t>(threads), 0);
  const auto d = static_cast<std::int32_t>(weights_.size());
  run_on_threads(threads, [&](int t) {
    double loss_sum = 0.0;
    std::int64_t right = 0;
    for (std::int64_t i = part_begin(n, threads, t); i < part_begin(n, threads, t + 1); ++i) {
      const data::SparseRow row = data.row(i);
      double z = 0.0;
      for (std::size_t p = 0; p < row.columns.size(); ++p) {
        if (row.columns[p] < d) {
          z += static_cast<double>(weights_[static_cast<std::size_t>(row.columns[p])]) *
               row.values[p];
        }
      }
      const double y = data.labels[static_cast<std::size_t>(i)];
      loss_sum += linear_loss(options_.loss, y * z);
      right += (z >= 0.0 ? 1.0 : -1.0) == y ? 1 : 0;
    }
    losses[static_cast<std::size_t>(t)] = loss_sum;
    correct[static_cast<std::size_t>(t)] = right;
  });
  return mean_over_threads<LinearEvaluation>(losses, correct, n);
}

}  // namespace dtrain::parallel
