#include "dtrain/train/strategies/federated/client_update.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "dtrain/base/rng.h"
#include "dtrain/optim/optimizer.h"
#include "dtrain/train/trainer.h"

namespace dtrain::train {
namespace {

// rng_stream purpose of the clients' local epoch orders.
constexpr std::uint64_t kLocalOrderPurpose = 0xFED2'0001;

// Dropout streams of client steps: distinct for every (round, client, local step) as long as a
// client takes fewer than 2^24 steps per round.
constexpr std::int64_t kStepsPerClientStream = std::int64_t{1} << 24;

}  // namespace

void add_proximal_gradient(float* grads, const float* params, const float* global, std::int64_t n,
                           double mu) {
  const auto m = static_cast<float>(mu);
  for (std::int64_t i = 0; i < n; ++i) grads[i] += m * (params[i] - global[i]);
}

ClientTrainer::ClientTrainer(const Config& config, nn::Model& model, const data::Dataset& train)
    : config_(config),
      model_(model),
      train_(train),
      local_(config, model, /*rank=*/0, /*ranks=*/1, trace_) {}

ClientResult ClientTrainer::train(std::span<const std::int64_t> indices,
                                  std::span<const float> global_params,
                                  std::span<const float> global_buffers, std::int64_t round,
                                  std::int64_t client, bool fail) {
  nn::ParamStore& store = model_.store();
  const std::int64_t n = store.num_params();
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(global_params.size()), n);
  DTRAIN_CHECK_EQ(static_cast<std::int64_t>(global_buffers.size()), store.num_buffer_elements());
  std::copy(global_params.begin(), global_params.end(), store.params());
  std::copy(global_buffers.begin(), global_buffers.end(), store.buffers());
  std::vector<optim::Segment> segments;
  for (const auto& entry : store.param_entries()) {
    segments.push_back({entry.name, entry.offset, entry.numel, entry.weight_decay});
  }
  const auto optimizer = optim::make_optimizer(optimizer_config(config_.optim), segments);
  const double mu = config_.federated.fedprox_mu;
  const double lr = config_.optim.lr;
  const std::int64_t batch = config_.train.batch_size;
  const auto seed = static_cast<std::uint64_t>(config_.train.seed);
  const std::int64_t clients = config_.federated.clients;

  ClientResult result;
  result.samples = static_cast<std::int64_t>(indices.size());
  std::vector<std::int64_t> order(indices.begin(), indices.end());
  for (std::int64_t epoch = 0; epoch < config_.federated.local_epochs; ++epoch) {
    std::copy(indices.begin(), indices.end(), order.begin());
    Rng rng(seed,
            rng_stream(kLocalOrderPurpose, static_cast<std::uint64_t>(round * clients + client),
                       static_cast<std::uint64_t>(epoch)));
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[static_cast<std::size_t>(rng.below(i))]);
    }
    for (std::int64_t begin = 0; begin < result.samples; begin += batch) {
      const std::int64_t count = std::min(batch, result.samples - begin);
      data::gather_batch(train_,
                         std::span<const std::int64_t>(order).subspan(
                             static_cast<std::size_t>(begin), static_cast<std::size_t>(count)),
                         x_, y_);
      const std::int64_t stream = (round * clients + client) * kStepsPerClientStream + result.steps;
      const LocalGradients::Result step =
          local_.compute(x_, y_, stream, static_cast<double>(count));
      if (mu > 0.0) {
        add_proximal_gradient(store.grads(), store.params(), global_params.data(), n, mu);
      }
      optimizer->step(store.params(), store.grads(), lr);
      ++result.steps;
      result.loss_sum += step.loss_sum;
      result.correct += step.correct;
      result.seen += count;
      if (fail) {
        throw ClientFailure(
            fmt::format("client {} failed in round {} after local step {} (injected: "
                        "federated.client_failure = {})",
                        client, round + 1, result.steps, config_.federated.client_failure));
      }
    }
  }
  return result;
}

}  // namespace dtrain::train
