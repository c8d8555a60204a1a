#include "dtrain/comm/algorithms/neighbor_allreduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#include "dtrain/base/error.h"

namespace dtrain::comm {
namespace {

// Elements combined per pass: the accumulator (8 KiB of f64) stays in L1 while each source
// streams through it once.
constexpr std::int64_t kCombineBlock = 1024;

// output = sum_j weights[j] x sources[j], in the order of `sources`. output may be one of them.
template <typename T>
void combine(const std::vector<const T*>& sources, const std::vector<T>& weights, T* output,
             std::int64_t count) {
  std::array<T, kCombineBlock> acc;
  for (std::int64_t begin = 0; begin < count; begin += kCombineBlock) {
    const std::int64_t n = std::min(kCombineBlock, count - begin);
    const T* first = sources[0] + begin;
    for (std::int64_t i = 0; i < n; ++i) acc[static_cast<std::size_t>(i)] = weights[0] * first[i];
    for (std::size_t j = 1; j < sources.size(); ++j) {
      const T* source = sources[j] + begin;
      const T weight = weights[j];
      for (std::int64_t i = 0; i < n; ++i) acc[static_cast<std::size_t>(i)] += weight * source[i];
    }
    std::copy_n(acc.begin(), n, output + begin);
  }
}

template <typename T>
void run(Channel& channel, const void* input, void* output, std::int64_t count,
         std::span<const Neighbor> in, std::span<const int> out) {
  const std::size_t bytes = static_cast<std::size_t>(count) * sizeof(T);
  const int self = channel.rank();
  // One scratch buffer per in-neighbour other than this rank, in the order of `in`.
  std::vector<std::vector<T>> received;
  received.reserve(in.size());
  std::vector<const T*> sources;
  std::vector<T> weights;
  std::vector<std::unique_ptr<Request>> requests;
  for (const Neighbor& neighbor : in) {
    weights.push_back(static_cast<T>(neighbor.weight));
    if (neighbor.rank == self) {
      sources.push_back(static_cast<const T*>(input));
      continue;
    }
    received.emplace_back(static_cast<std::size_t>(count));
    sources.push_back(received.back().data());
    if (bytes > 0) requests.push_back(channel.irecv(neighbor.rank, received.back().data(), bytes));
  }
  if (bytes > 0) {
    for (const int peer : out) requests.push_back(channel.isend(peer, input, bytes));
  }
  // The sends read `input`, which may be `output`: nothing is written before all are done.
  channel.wait_all(requests);
  combine(sources, weights, static_cast<T*>(output), count);
}

}  // namespace

void neighbor_allreduce(Channel& channel, const void* input, void* output, std::int64_t count,
                        DType dtype, std::span<const Neighbor> in, std::span<const int> out) {
  switch (dtype) {
    case DType::kF32: return run<float>(channel, input, output, count, in, out);
    case DType::kF64: return run<double>(channel, input, output, count, in, out);
    default:
      throw ConfigError(fmt::format("neighbor_allreduce: dtype {} is not supported: f32 or f64",
                                    dtype_name(dtype)));
  }
}

}  // namespace dtrain::comm
