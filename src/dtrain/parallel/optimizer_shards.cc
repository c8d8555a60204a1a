#include "dtrain/parallel/optimizer_shards.h"

#include <algorithm>

#include "dtrain/base/error.h"
#include "dtrain/comm/algorithms/blocks.h"

namespace dtrain::parallel {

std::vector<optim::Segment> shard_segments(const std::vector<nn::ParamEntry>& entries,
                                           const std::vector<GradientBucket>& buckets, int rank,
                                           int ranks) {
  DTRAIN_CHECK(ranks >= 1 && rank >= 0 && rank < ranks, "rank {} of {}", rank, ranks);
  std::vector<optim::Segment> segments;
  for (const GradientBucket& bucket : buckets) {
    const std::int64_t begin = bucket.offset + comm::block_begin(bucket.count, ranks, rank);
    const std::int64_t end = begin + comm::block_size(bucket.count, ranks, rank);
    for (std::size_t e = bucket.first_entry; e < bucket.end_entry; ++e) {
      const nn::ParamEntry& entry = entries[e];
      const std::int64_t from = std::max(begin, entry.offset);
      const std::int64_t to = std::min(end, entry.offset + entry.numel);
      if (from < to) segments.push_back({entry.name, from, to - from, entry.weight_decay});
    }
  }
  std::sort(segments.begin(), segments.end(),
            [](const optim::Segment& a, const optim::Segment& b) { return a.offset < b.offset; });
  return segments;
}

std::vector<float> expand_state(const std::vector<optim::Segment>& shard,
                                std::span<const float> packed, std::int64_t total) {
  std::vector<float> full(static_cast<std::size_t>(total), 0.0f);
  std::size_t at = 0;
  for (const optim::Segment& segment : shard) {
    DTRAIN_CHECK(segment.offset + segment.numel <= total && at + segment.numel <= packed.size(),
                 "segment {} [{}, +{}) outside the state ({} packed, {} in all)", segment.name,
                 segment.offset, segment.numel, packed.size(), total);
    std::copy_n(packed.begin() + static_cast<std::ptrdiff_t>(at), segment.numel,
                full.begin() + segment.offset);
    at += static_cast<std::size_t>(segment.numel);
  }
  return full;
}

std::vector<float> pack_state(const std::vector<optim::Segment>& shard,
                              std::span<const float> full) {
  std::vector<float> packed;
  for (const optim::Segment& segment : shard) {
    DTRAIN_CHECK(segment.offset + segment.numel <= static_cast<std::int64_t>(full.size()),
                 "segment {} [{}, +{}) outside the state of {} elements", segment.name,
                 segment.offset, segment.numel, full.size());
    packed.insert(packed.end(), full.begin() + segment.offset,
                  full.begin() + segment.offset + segment.numel);
  }
  return packed;
}

}  // namespace dtrain::parallel
