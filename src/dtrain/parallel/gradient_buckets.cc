#include "dtrain/parallel/gradient_buckets.h"

#include <fmt/format.h>

#include <algorithm>

#include "dtrain/base/error.h"

namespace dtrain::parallel {

std::vector<GradientBucket> make_gradient_buckets(const std::vector<nn::ParamEntry>& entries,
                                                  const std::vector<std::size_t>& param_layer,
                                                  std::int64_t fusion_bytes) {
  if (param_layer.size() != entries.size()) {
    throw InternalError(fmt::format("make_gradient_buckets: {} entries but {} layer indices",
                                    entries.size(), param_layer.size()));
  }
  if (fusion_bytes < 0) {
    throw ConfigError(fmt::format("fusion_bytes must be >= 0, got {}", fusion_bytes));
  }
  constexpr std::int64_t kBytesPerElement = 4;  // gradients are f32
  std::vector<GradientBucket> buckets;
  auto close = [&](std::size_t first, std::size_t end) {
    GradientBucket bucket;
    bucket.first_entry = first;
    bucket.end_entry = end;
    bucket.offset = entries[first].offset;
    bucket.count = entries[end - 1].offset + entries[end - 1].numel - bucket.offset;
    bucket.ready_after_layer = *std::min_element(param_layer.begin() + static_cast<long>(first),
                                                 param_layer.begin() + static_cast<long>(end));
    bucket.name = end - first == 1
                      ? entries[first].name
                      : fmt::format("{}..{}", entries[end - 1].name, entries[first].name);
    buckets.push_back(std::move(bucket));
  };
  std::size_t end = entries.size();  // the open bucket is [k, end)
  std::int64_t bytes = 0;
  for (std::size_t k = entries.size(); k-- > 0;) {
    const std::int64_t tensor_bytes = entries[k].numel * kBytesPerElement;
    const bool fits = fusion_bytes > 0 && bytes + tensor_bytes <= fusion_bytes;
    if (k + 1 < end && !fits) {  // the open bucket is non-empty and k does not fit: close it
      close(k + 1, end);
      end = k + 1;
      bytes = 0;
    }
    bytes += tensor_bytes;
  }
  if (end > 0) close(0, end);
  return buckets;
}

}  // namespace dtrain::parallel
