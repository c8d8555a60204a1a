#include "dtrain/nn/model_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <limits>

#include "dtrain/base/error.h"

namespace dtrain::nn {

namespace {

void check_stages(std::size_t layers, int stages) {
  if (stages < 1) throw ConfigError(fmt::format("a model needs at least 1 stage, got {}", stages));
  if (layers < static_cast<std::size_t>(stages)) {
    throw ConfigError(fmt::format(
        "the model has {} layers and cannot be cut into {} pipeline stages: each stage needs at "
        "least one layer (use at most {} stages)",
        layers, stages, layers));
  }
}

}  // namespace

std::vector<LayerRange> partition_by_count(std::size_t layers, int stages) {
  check_stages(layers, stages);
  const auto p = static_cast<std::size_t>(stages);
  std::vector<LayerRange> ranges;
  std::size_t begin = 0;
  for (std::size_t s = 0; s < p; ++s) {
    const std::size_t size = layers / p + (s < layers % p ? 1 : 0);
    ranges.push_back({begin, begin + size});
    begin += size;
  }
  return ranges;
}

std::vector<LayerRange> partition_balanced(std::span<const double> costs, int stages) {
  const std::size_t n = costs.size();
  check_stages(n, stages);
  const auto p = static_cast<std::size_t>(stages);
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + std::max(costs[i], 0.0);
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][j]: the smallest possible largest stage cost of layers [0, j) in s + 1 stages;
  // cut[s][j]: where the last of those stages begins.
  std::vector<std::vector<double>> best(p, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<std::size_t>> cut(p, std::vector<std::size_t>(n + 1, 0));
  for (std::size_t j = 1; j <= n; ++j) best[0][j] = prefix[j];
  for (std::size_t s = 1; s < p; ++s) {
    for (std::size_t j = s + 1; j <= n; ++j) {
      for (std::size_t i = s; i < j; ++i) {  // last stage [i, j), i >= s layers before it
        const double value = std::max(best[s - 1][i], prefix[j] - prefix[i]);
        if (value < best[s][j]) {  // strict: the first (smallest) i wins ties
          best[s][j] = value;
          cut[s][j] = i;
        }
      }
    }
  }
  std::vector<LayerRange> ranges(p);
  std::size_t end = n;
  for (std::size_t s = p; s-- > 0;) {
    const std::size_t begin = s == 0 ? 0 : cut[s][end];
    ranges[s] = {begin, end};
    end = begin;
  }
  return ranges;
}

std::vector<double> measure_layer_costs(Model& model, const tensor::Tensor& batch, int repeats) {
  using Clock = std::chrono::steady_clock;
  const std::size_t n = model.layers().size();
  ParamStore& store = model.store();
  const std::vector<float> buffers(store.buffers(), store.buffers() + store.num_buffer_elements());
  std::vector<std::vector<double>> runs(n);
  std::vector<Clock::time_point> marks(n + 1);
  tensor::Tensor dy;
  for (int r = 0; r <= std::max(repeats, 1); ++r) {
    const tensor::Tensor& y =
        model.forward(batch, ForwardContext{Mode::kTrain, 0, 0, 0},
                      [&](std::size_t layer) { marks[layer] = Clock::now(); });
    marks[n] = Clock::now();
    std::vector<double> seconds(n);
    for (std::size_t i = 0; i < n; ++i) {
      seconds[i] = std::chrono::duration<double>(marks[i + 1] - marks[i]).count();
    }
    dy.ensure_shape(y.shape());
    dy.fill(1.0f / static_cast<float>(std::max<std::int64_t>(dy.numel(), 1)));
    Clock::time_point last = Clock::now();
    model.backward(dy, [&](std::size_t layer) {
      const Clock::time_point now = Clock::now();
      seconds[layer] += std::chrono::duration<double>(now - last).count();
      last = now;
    });
    if (r == 0) continue;  // warm-up: first-touch allocations
    for (std::size_t i = 0; i < n; ++i) runs[i].push_back(seconds[i]);
  }
  std::copy(buffers.begin(), buffers.end(), store.buffers());
  store.zero_grads();
  std::vector<double> costs(n);
  for (std::size_t i = 0; i < n; ++i) {
    std::sort(runs[i].begin(), runs[i].end());
    costs[i] = runs[i][runs[i].size() / 2];
  }
  return costs;
}

}  // namespace dtrain::nn
