#include "dtrain/train/local_gradients.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <string>

#include "dtrain/comm/rank_threads.h"
#include "dtrain/nn/loss.h"

namespace dtrain::train {

LocalGradients::LocalGradients(const Config& config, nn::Model& model, int rank, int ranks,
                               TraceRecorder& trace)
    : config_(config),
      model_(model),
      rank_(rank),
      ranks_(ranks),
      trace_(trace),
      straggler_(parse_straggler(config.parallel.straggler)) {}

float LocalGradients::loss(const tensor::Tensor& logits, std::span<const std::int32_t> labels,
                           tensor::Tensor* dlogits) {
  if (config_.train.loss == "cross_entropy") {
    return nn::softmax_cross_entropy(logits, labels, dlogits);
  }
  // mse against one-hot targets: (B, C) with a 1 at each label.
  one_hot_.ensure_shape(logits.shape());
  one_hot_.zero();
  const std::int64_t classes = logits.dim(1);
  for (std::size_t b = 0; b < labels.size(); ++b) {
    one_hot_.data()[static_cast<std::int64_t>(b) * classes + labels[b]] = 1.0f;
  }
  return nn::mse_loss(logits, one_hot_, dlogits);
}

LocalGradients::Result LocalGradients::compute(
    const tensor::Tensor& x, std::span<const std::int32_t> labels, std::int64_t step,
    double scale_to, const std::function<void(std::size_t layer)>& after_layer) {
  using Clock = TraceRecorder::Clock;
  const auto start = Clock::now();
  const std::int64_t local = x.dim(0);
  // Labels per sample: 1 for a class, T for a text window's next bytes.
  const std::int64_t per_sample = local > 0 ? static_cast<std::int64_t>(labels.size()) / local : 1;
  const std::int64_t micro_batches = std::min(config_.train.accumulate_steps, local);
  nn::ParamStore& store = model_.store();
  Result result;
  result.samples = local;
  for (std::int64_t m = 0; m < micro_batches; ++m) {
    const std::int64_t begin = local * m / micro_batches;
    const std::int64_t end = local * (m + 1) / micro_batches;
    const bool whole = begin == 0 && end == x.dim(0);
    const tensor::Tensor micro = whole ? tensor::Tensor() : x.slice(begin, end);
    const tensor::Tensor& input = whole ? x : micro;
    const auto micro_labels = labels.subspan(static_cast<std::size_t>(begin * per_sample),
                                             static_cast<std::size_t>((end - begin) * per_sample));
    const auto stream = static_cast<std::uint64_t>((step * micro_batches + m) * ranks_ + rank_);
    const auto forward_start = Clock::now();
    const tensor::Tensor& logits = model_.forward(
        input, nn::ForwardContext{nn::Mode::kTrain, static_cast<std::uint64_t>(config_.train.seed),
                                  static_cast<std::int64_t>(stream)});
    const float value = loss(logits, micro_labels, &dlogits_);
    result.correct += nn::count_correct(logits, micro_labels);
    result.loss_sum += static_cast<double>(value) * static_cast<double>(end - begin);
    const float weight = static_cast<float>(end - begin) / static_cast<float>(scale_to);
    if (weight != 1.0f) {
      float* d = dlogits_.data();
      for (std::int64_t i = 0; i < dlogits_.numel(); ++i) d[i] *= weight;
    }
    const auto forward_end = Clock::now();
    if (m == 0) {  // after the forward: see the header
      store.zero_grads();
      if (trace_.enabled()) {
        trace_.add("zero gradients", "compute", TraceRecorder::kComputeThread, forward_end,
                   Clock::now(), fmt::format(R"({{"step":{}}})", step));
      }
    }
    const auto backward_start = Clock::now();
    const bool last = m + 1 == micro_batches;
    if (after_layer && last) {
      model_.backward(dlogits_, after_layer);
    } else {
      model_.backward(dlogits_);
    }
    if (trace_.enabled()) {  // the argument strings cost allocations: only while tracing
      const std::string args = fmt::format(R"({{"step":{},"micro_batch":{}}})", step, m);
      trace_.add("forward", "compute", TraceRecorder::kComputeThread, forward_start, forward_end,
                 args);
      trace_.add("backward", "compute", TraceRecorder::kComputeThread, backward_start, Clock::now(),
                 args);
    }
  }
  if (straggler_.kind != StragglerSpec::Kind::kNone) {
    // An injected straggler: its gradients arrive late, as a slow machine's.
    const double compute = std::chrono::duration<double>(Clock::now() - start).count();
    const double delay =
        straggler_delay_seconds(straggler_, static_cast<std::uint64_t>(config_.train.seed),
                                straggler_rank_ >= 0 ? straggler_rank_ : rank_, step, compute);
    if (delay > 0.0) {
      const auto delay_start = Clock::now();
      // Cut short when another rank of this process fails or ends: the deadline of the error
      // that names it must hold, and this rank's next message then fails at once.
      comm::sleep_unless_aborted(std::chrono::duration<double>(delay));
      trace_.add("straggler delay", "straggler", TraceRecorder::kComputeThread, delay_start,
                 Clock::now(), fmt::format(R"({{"step":{}}})", step));
    }
  }
  return result;
}

}  // namespace dtrain::train
