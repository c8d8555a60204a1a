#include "dtrain/parallel/onebit_allreduce.h"

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::parallel {

std::int64_t OneBitAllreduce::chunk_elements(std::int64_t count, int ranks) {
  const std::int64_t per_rank = (count + ranks - 1) / ranks;
  return (per_rank + 7) / 8 * 8;
}

std::int64_t OneBitAllreduce::payload_bytes(std::int64_t count, int ranks) {
  return 4 + chunk_elements(count, ranks) / 8;
}

std::int64_t OneBitAllreduce::bytes_sent(std::int64_t count, int ranks) {
  return 2 * std::int64_t{ranks - 1} * payload_bytes(count, ranks);
}

OneBitAllreduce::OneBitAllreduce(comm::Communicator& comm, std::int64_t count,
                                 comm::CollectiveOptions options)
    : comm_(comm),
      options_(std::move(options)),
      count_(count),
      chunk_(chunk_elements(count, comm.size())),
      payload_(payload_bytes(count, comm.size())),
      worker_(count),
      server_(chunk_elements(count, comm.size())) {
  DTRAIN_CHECK_GE(count, 0);
  const auto ranks = static_cast<std::size_t>(comm.size());
  const auto payload = static_cast<std::size_t>(payload_);
  // Zero beyond each chunk's bits: the bytes on the wire are a function of the data alone.
  sent_.assign(ranks * payload, 0);
  received_.assign(ranks * payload, 0);
  served_.assign(payload, 0);
  gathered_.assign(ranks * payload, 0);
  average_.assign(static_cast<std::size_t>(chunk_), 0.0f);
  scratch_.assign(static_cast<std::size_t>(chunk_), 0.0f);
  // The alltoall and allgather have one algorithm each.
  options_.algorithm.clear();
}

std::int64_t OneBitAllreduce::chunk_first(int j) const { return std::min(count_, chunk_ * j); }

std::int64_t OneBitAllreduce::chunk_count(int j) const {
  return std::min(count_, chunk_first(j) + chunk_) - chunk_first(j);
}

void OneBitAllreduce::average(float* data) {
  const int ranks = comm_.size();
  const int rank = comm_.rank();
  const auto payload = static_cast<std::size_t>(payload_);
  for (int j = 0; j < ranks; ++j) {
    const std::int64_t n = chunk_count(j);
    if (n > 0) {
      worker_.encode(codec_, chunk_first(j), data + chunk_first(j), n,
                     sent_.data() + static_cast<std::size_t>(j) * payload, 0, scratch_.data());
    }
  }
  comm_.alltoall(sent_.data(), received_.data(), payload_, DType::kU8, options_);
  const std::int64_t mine = chunk_count(rank);
  if (mine > 0) {
    std::fill(average_.begin(), average_.end(), 0.0f);
    for (int r = 0; r < ranks; ++r) {
      codec_.decode_add(received_.data() + static_cast<std::size_t>(r) * payload, mine,
                        average_.data(), 0);
    }
    const float inverse = 1.0f / static_cast<float>(ranks);
    for (std::int64_t i = 0; i < mine; ++i) average_[static_cast<std::size_t>(i)] *= inverse;
    server_.encode(codec_, 0, average_.data(), mine, served_.data(), 0, scratch_.data());
  }
  comm_.allgather(served_.data(), gathered_.data(), payload_, DType::kU8, options_);
  for (int j = 0; j < ranks; ++j) {
    const std::int64_t n = chunk_count(j);
    if (n > 0) {
      codec_.decode(gathered_.data() + static_cast<std::size_t>(j) * payload, n,
                    data + chunk_first(j), 0);
    }
  }
}

void OneBitAllreduce::set_errors(std::span<const float> worker, std::span<const float> server) {
  worker_.set_residual(worker);
  server_.set_residual(server);
}

}  // namespace dtrain::parallel
