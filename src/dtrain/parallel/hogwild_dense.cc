#include "dtrain/parallel/hogwild_dense.h"

#include <atomic>
#include <chrono>
#include <cmath>

#include "dtrain/base/error.h"
#include "dtrain/base/thread_pool.h"
#include "dtrain/data/shuffled_sampler.h"
#include "dtrain/nn/loss.h"
#include "dtrain/parallel/hogwild_threads.h"

namespace dtrain::parallel {
namespace {

using hogwild_detail::mean_over_threads;
using hogwild_detail::part_begin;
using hogwild_detail::run_on_threads;
using hogwild_detail::thread_cpu_seconds;
using Weight = std::atomic_ref<float>;

// Samples per forward pass in evaluate().
constexpr std::int64_t kEvalBatch = 256;

}  // namespace

HogwildDense::HogwildDense(const nn::ModelSpec& spec, const data::Dataset& train,
                           HogwildDenseOptions options)
    : train_(train), options_(options) {
  if (options_.threads < 1) {
    throw ConfigError(fmt::format("Hogwild!: threads must be >= 1, got {}", options_.threads));
  }
  if (options_.batch_size < 1) {
    throw ConfigError(
        fmt::format("Hogwild!: batch_size must be >= 1, got {}", options_.batch_size));
  }
  if (!std::isfinite(options_.weight_decay) || options_.weight_decay < 0.0f) {
    throw ConfigError(fmt::format("Hogwild!: weight_decay must be finite and >= 0, got {}",
                                  options_.weight_decay));
  }
  for (int t = 0; t < options_.threads; ++t) replicas_.push_back(nn::build_model(spec));
  nn::Model& first = *replicas_.front();
  if (first.store().num_buffer_elements() > 0) {
    throw ConfigError(fmt::format(
        "Hogwild! shares the trained parameters between its threads, but this model also keeps "
        "{} batch-norm running statistics, which would be each thread's own and never agree: "
        "remove its batch_norm layers, or train it with another strategy (data_parallel)",
        first.store().num_buffer_elements()));
  }
  first.init(options_.seed);
  const nn::ParamStore& store = first.store();
  shared_.assign(store.params(), store.params() + store.num_params());
  decay_.assign(shared_.size(), 0.0f);
  for (const nn::ParamEntry& entry : store.param_entries()) {
    if (!entry.weight_decay) continue;
    std::fill(decay_.begin() + entry.offset, decay_.begin() + entry.offset + entry.numel,
              options_.weight_decay);
  }
}

HogwildDense::~HogwildDense() = default;

HogwildEpoch HogwildDense::run_epoch(std::int64_t epoch, float lr, std::int64_t start,
                                     const HogwildPause* pause) {
  DTRAIN_CHECK(lr > 0.0f && std::isfinite(lr), "learning rate {}", lr);
  const int threads = options_.threads;
  const std::vector<std::int64_t> order =
      data::ShuffledSampler(train_.size(), options_.seed).epoch_order(epoch);
  const std::int64_t n = static_cast<std::int64_t>(order.size());
  const std::int64_t batch = options_.batch_size;
  const std::int64_t params = num_params();
  DTRAIN_CHECK(start >= 0 && start <= n, "start position {} of an epoch of {}", start, n);
  HogwildEpoch result;
  result.thread_updates.assign(static_cast<std::size_t>(threads), 0);
  result.thread_cpu_seconds.assign(static_cast<std::size_t>(threads), 0.0);
  float* shared = shared_.data();
  const float* decay = decay_.data();
  // A thread takes the next batch when it is free.
  hogwild_detail::ChunkCounter batches(n, batch, start);
  hogwild_detail::PauseMeeting meeting(
      threads, pause != nullptr ? pause->timeout : std::chrono::milliseconds(0));
  hogwild_detail::EpochEnd end;
  const auto begin = std::chrono::steady_clock::now();
  end.began = begin;
  run_on_threads(threads, [&](int t) {
    const double cpu_start = thread_cpu_seconds();
    ScopedComputePool pool(1);  // one thread per replica: the parallelism is the replicas
    nn::Model& model = *replicas_[static_cast<std::size_t>(t)];
    nn::ParamStore& store = model.store();
    float* local = store.params();
    const float* grads = store.grads();
    tensor::Tensor x;
    tensor::Tensor dlogits;
    std::vector<std::int32_t> y;
    auto train = [&](const hogwild_detail::ChunkCounter::Range& claimed) {
      const std::int64_t first = claimed.begin;
      const std::int64_t count = claimed.size();
      for (std::int64_t i = 0; i < params; ++i) {
        local[i] = Weight(shared[i]).load(std::memory_order_relaxed);
      }
      data::gather_batch(train_,
                         std::span<const std::int64_t>(order).subspan(
                             static_cast<std::size_t>(first), static_cast<std::size_t>(count)),
                         x, y);
      store.zero_grads();
      // Dropout streams keyed by the batch's first position in the epoch: independent of T.
      const nn::ForwardContext ctx{nn::Mode::kTrain, options_.seed, epoch * n + first};
      const tensor::Tensor& logits = model.forward(x, ctx);
      nn::softmax_cross_entropy(logits, y, &dlogits);
      model.backward(dlogits);
      for (std::int64_t i = 0; i < params; ++i) {
        // Load and store, not fetch_add: a write of another thread in between is lost (allowed).
        Weight wi(shared[i]);
        const float old = wi.load(std::memory_order_relaxed);
        wi.store(old - lr * (grads[i] + decay[i] * old), std::memory_order_relaxed);
      }
    };
    const std::int64_t done = hogwild_detail::train_chunks(t, batches, meeting, pause, end, train);
    result.thread_updates[static_cast<std::size_t>(t)] = done;
    result.thread_cpu_seconds[static_cast<std::size_t>(t)] = thread_cpu_seconds() - cpu_start;
  });
  result.finish(begin, end.stopped.load(std::memory_order_relaxed), end.position, start, n);
  return result;
}

DenseEvaluation HogwildDense::evaluate(const data::Dataset& data) {
  const std::int64_t n = data.size();
  const int threads =
      static_cast<int>(std::max<std::int64_t>(1, std::min<std::int64_t>(options_.threads, n)));
  std::vector<double> losses(static_cast<std::size_t>(threads), 0.0);
  std::vector<std::int64_t> correct(static_cast<std::size_t>(threads), 0);
  run_on_threads(threads, [&](int t) {
    ScopedComputePool pool(1);
    nn::Model& model = *replicas_[static_cast<std::size_t>(t)];
    std::copy(shared_.begin(), shared_.end(), model.store().params());
    tensor::Tensor x;
    std::vector<std::int32_t> y;
    std::vector<std::int64_t> indices;
    const std::int64_t end = part_begin(n, threads, t + 1);
    for (std::int64_t first = part_begin(n, threads, t); first < end; first += kEvalBatch) {
      const std::int64_t count = std::min(kEvalBatch, end - first);
      indices.resize(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) indices[static_cast<std::size_t>(i)] = first + i;
      data::gather_batch(data, indices, x, y);
      const tensor::Tensor& logits = model.forward(x, nn::ForwardContext{nn::Mode::kEval});
      losses[static_cast<std::size_t>(t)] +=
          static_cast<double>(nn::softmax_cross_entropy(logits, y, nullptr)) *
          static_cast<double>(count);
      const std::int64_t classes = logits.shape()[1];
      for (std::int64_t i = 0; i < count; ++i) {
        const float* row = logits.data() + i * classes;
        const auto best = std::max_element(row, row + classes) - row;
        correct[static_cast<std::size_t>(t)] += best == y[static_cast<std::size_t>(i)] ? 1 : 0;
      }
    }
  });
  return mean_over_threads<DenseEvaluation>(losses, correct, n);
}

}  // namespace dtrain::parallel
