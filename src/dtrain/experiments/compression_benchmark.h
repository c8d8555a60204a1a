// dtrain bench compression: what each codec of the catalog (compress/, docs/COMPRESSION.md) costs
// on one core, beside the bound it is judged against: memcpy of the same buffer, measured in the
// same run. Encode and decode of an n-element gradient (4 MiB by default) are timed separately;
// each figure is the median of `repeats` timed runs of enough calls to last about 0.1 s.
//
// Error feedback is left out (it adds one read-modify-write pass: compensate and settle); PowerSGD
// runs on one rank, the buffer viewed as its near-square matrix (compute_p, orthogonalize,
// compute_q, decode: powersgd.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::experiments {

struct CompressionBenchmarkRow {
  std::string codec;  // "topk:0.01"; "memcpy" for the bound
  std::int64_t elements = 0;
  double encode_ms = 0.0;  // per call
  double decode_ms = 0.0;  // 0 for memcpy
  double payload_bytes = 0.0;
  double ratio = 1.0;      // 4 n / payload bytes
  double vs_memcpy = 1.0;  // (encode + decode) / memcpy of 4 n bytes timed before and after it
};

// ConfigError for an unknown codec, elements < 1 or repeats < 1, before anything runs.
void check_compression_benchmark(const std::vector<std::string>& codecs, std::int64_t elements,
                                 int repeats);

// The memcpy row first, then one row per codec in order.
std::vector<CompressionBenchmarkRow> run_compression_benchmark(
    const std::vector<std::string>& codecs, std::int64_t elements, int repeats,
    const std::function<void(const CompressionBenchmarkRow&)>& on_row = {});

}  // namespace dtrain::experiments
