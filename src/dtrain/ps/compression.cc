#include "dtrain/ps/compression.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <vector>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/ps/protocol.h"

namespace dtrain::ps {
namespace {

// The payload's size for n elements, as a formula ("8k, k = 0.01 n").
std::string payload_formula(const compress::CodecSpec& spec) {
  switch (spec.kind) {
    case compress::CodecKind::kNone: return "4n";
    case compress::CodecKind::kFp16:
    case compress::CodecKind::kBf16: return "2n";
    case compress::CodecKind::kSign: return "4 + ceil(n / 8)";
    case compress::CodecKind::kQsgd: return fmt::format("4 + ceil({} n / 8)", spec.bits);
    case compress::CodecKind::kTopk: return fmt::format("8k, k = {}", spec.keep.text());
    case compress::CodecKind::kRandomk: return fmt::format("4k, k = {}", spec.keep.text());
    case compress::CodecKind::kPowerSgd: return "?";
  }
  return "?";
}

std::string formula(const compress::CodecSpec& spec, const ShardLayout& layout, std::size_t header,
                    std::int64_t total) {
  std::vector<std::int64_t> sizes;
  for (int s = 0; s < layout.servers(); ++s) sizes.push_back(layout.shard(s).size());
  return fmt::format(
      "sum over S = {} servers of ({} B header + payload(n_s)), payload(n) = {} "
      "({}), n_s = {}: {} B",
      layout.servers(), header, payload_formula(spec), spec.text(), fmt::join(sizes, ", "), total);
}

}  // namespace

void check_compression(const Compression& compression, const std::string& push_key,
                       const std::string& pull_key) {
  if (compression.push.kind == compress::CodecKind::kPowerSgd) {
    throw ConfigError(fmt::format(
        "{} = \"{}\": PowerSGD's factors are sums over the workers between two rounds (allreduce "
        "P, orthogonalize, allreduce Q), which one worker's push to a server cannot form; use "
        "topk, randomk, sign, qsgd, fp16 or bf16 with parameter servers",
        push_key, compression.push.text()));
  }
  const compress::CodecKind pull = compression.pull.kind;
  if (pull != compress::CodecKind::kNone && pull != compress::CodecKind::kFp16 &&
      pull != compress::CodecKind::kBf16) {
    throw ConfigError(fmt::format(
        "{} = \"{}\": pulls send parameters, which only a cast keeps (a sparsifier or sign would "
        "send another model each step); accepted: none, fp16, bf16",
        pull_key, compression.pull.text()));
  }
}

std::size_t push_payload_bytes(const compress::CodecSpec& spec, std::int64_t n) {
  const auto codec = compress::make_codec(spec);
  return codec ? codec->encoded_bytes(n) : static_cast<std::size_t>(n) * sizeof(float);
}

std::size_t pull_payload_bytes(const compress::CodecSpec& spec, std::int64_t n) {
  return push_payload_bytes(spec, n);
}

std::int64_t predicted_push_bytes(const Compression& compression, const ShardLayout& layout) {
  std::int64_t bytes = 0;
  for (int s = 0; s < layout.servers(); ++s) {
    bytes += static_cast<std::int64_t>(
        sizeof(RequestHeader) + push_payload_bytes(compression.push, layout.shard(s).size()));
  }
  return bytes;
}

std::int64_t predicted_pull_bytes(const Compression& compression, const ShardLayout& layout) {
  std::int64_t bytes = 0;
  for (int s = 0; s < layout.servers(); ++s) {
    bytes += static_cast<std::int64_t>(
        sizeof(ReplyHeader) + pull_payload_bytes(compression.pull, layout.shard(s).size()));
  }
  return bytes;
}

std::string push_bytes_formula(const Compression& compression, const ShardLayout& layout) {
  return formula(compression.push, layout, sizeof(RequestHeader),
                 predicted_push_bytes(compression, layout));
}

std::string pull_bytes_formula(const Compression& compression, const ShardLayout& layout) {
  return formula(compression.pull, layout, sizeof(ReplyHeader),
                 predicted_pull_bytes(compression, layout));
}

std::uint64_t push_seed(std::uint64_t seed, int worker, std::int64_t clock, int server) {
  return rng_stream(seed, static_cast<std::uint64_t>(worker) + 1,
                    (static_cast<std::uint64_t>(clock) << 16) ^ static_cast<std::uint64_t>(server));
}

}  // namespace dtrain::ps
