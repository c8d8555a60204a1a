#include "dtrain/data/client_partition.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <numeric>
#include <utility>

#include "dtrain/base/error.h"

namespace dtrain::data {
namespace {

// rng_stream purposes of the partitions' draws.
constexpr std::uint64_t kIidPurpose = 0xFED0'0001;
constexpr std::uint64_t kShardPurpose = 0xFED0'0002;
constexpr std::uint64_t kDirichletShufflePurpose = 0xFED0'0003;
constexpr std::uint64_t kDirichletGammaPurpose = 0xFED0'0004;

constexpr const char* kForms = "accepted: iid, shards, shards:S (S >= 1), dirichlet:A (A > 0)";

// Uniform in (0, 1) with 32 random bits: never 0, so logs and powers stay finite.
double open_uniform(Rng& rng) { return (static_cast<double>(rng.next_u32()) + 0.5) / 4294967296.0; }

// Fisher-Yates shuffle of `values` by Rng(seed, stream).
void shuffle(std::vector<std::int64_t>& values, std::uint64_t seed, std::uint64_t stream) {
  Rng rng(seed, stream);
  for (std::size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<std::size_t>(rng.below(i));
    std::swap(values[i - 1], values[j]);
  }
}

std::vector<std::int64_t> iota_indices(std::int64_t n) {
  std::vector<std::int64_t> indices(static_cast<std::size_t>(n));
  std::iota(indices.begin(), indices.end(), std::int64_t{0});
  return indices;
}

ClientPartition iid(std::int64_t n, std::int64_t k, std::uint64_t seed) {
  std::vector<std::int64_t> order = iota_indices(n);
  shuffle(order, seed, rng_stream(kIidPurpose));
  ClientPartition out;
  out.clients.resize(static_cast<std::size_t>(k));
  for (std::int64_t c = 0; c < k; ++c) {
    out.clients[static_cast<std::size_t>(c)].assign(order.begin() + c * n / k,
                                                    order.begin() + (c + 1) * n / k);
  }
  return out;
}

ClientPartition shards(std::span<const std::int32_t> labels, std::int64_t k, std::int64_t per,
                       std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(labels.size());
  const std::int64_t count = k * per;
  if (count > n) {
    throw ConfigError(fmt::format(
        "partition shards:{} over {} clients needs {} shards but the training set has {} "
        "samples; use fewer clients or fewer shards per client",
        per, k, count, n));
  }
  std::vector<std::int64_t> sorted = iota_indices(n);
  std::stable_sort(sorted.begin(), sorted.end(), [&](std::int64_t a, std::int64_t b) {
    return labels[static_cast<std::size_t>(a)] < labels[static_cast<std::size_t>(b)];
  });
  std::vector<std::int64_t> shard_order = iota_indices(count);
  shuffle(shard_order, seed, rng_stream(kShardPurpose));
  ClientPartition out;
  out.clients.resize(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t s = shard_order[static_cast<std::size_t>(i)];
    auto& mine = out.clients[static_cast<std::size_t>(i / per)];
    mine.insert(mine.end(), sorted.begin() + s * n / count, sorted.begin() + (s + 1) * n / count);
  }
  return out;
}

// One Dirichlet draw (number `draw`): each class's samples cut at the cumulative proportions of
// p_c ~ Dir(alpha 1_K).
ClientPartition dirichlet_once(std::span<const std::int32_t> labels, std::int64_t classes,
                               std::int64_t k, double alpha, std::uint64_t seed, int draw) {
  std::vector<std::vector<std::int64_t>> by_class(static_cast<std::size_t>(classes));
  for (std::size_t i = 0; i < labels.size(); ++i) {
    by_class[static_cast<std::size_t>(labels[i])].push_back(static_cast<std::int64_t>(i));
  }
  ClientPartition out;
  out.clients.resize(static_cast<std::size_t>(k));
  std::vector<double> p(static_cast<std::size_t>(k));
  for (std::int64_t c = 0; c < classes; ++c) {
    auto& members = by_class[static_cast<std::size_t>(c)];
    const auto uc = static_cast<std::uint64_t>(c);
    const auto ud = static_cast<std::uint64_t>(draw);
    shuffle(members, seed, rng_stream(kDirichletShufflePurpose, ud, uc));
    double total = 0.0;
    for (std::int64_t j = 0; j < k; ++j) {
      Rng rng(seed,
              rng_stream(kDirichletGammaPurpose, ud * static_cast<std::uint64_t>(classes) + uc,
                         static_cast<std::uint64_t>(j)));
      p[static_cast<std::size_t>(j)] = gamma_variate(alpha, rng);
      total += p[static_cast<std::size_t>(j)];
    }
    const auto nc = static_cast<std::int64_t>(members.size());
    double cumulative = 0.0;
    std::int64_t begin = 0;
    for (std::int64_t j = 0; j < k; ++j) {
      cumulative += p[static_cast<std::size_t>(j)] / total;
      const std::int64_t end =
          j + 1 == k
              ? nc
              : std::clamp(static_cast<std::int64_t>(std::floor(cumulative * nc)), begin, nc);
      auto& mine = out.clients[static_cast<std::size_t>(j)];
      mine.insert(mine.end(), members.begin() + begin, members.begin() + end);
      begin = end;
    }
  }
  return out;
}

}  // namespace

PartitionSpec parse_partition(std::string_view text) {
  PartitionSpec spec;
  if (text == "iid") return spec;
  const auto colon = text.find(':');
  const std::string_view head = text.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? "" : text.substr(colon + 1);
  if (head == "shards") {
    spec.kind = PartitionKind::kShards;
    if (colon == std::string_view::npos) return spec;
    std::int64_t per = 0;
    const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), per);
    if (ec != std::errc() || end != arg.data() + arg.size() || per < 1) {
      throw ConfigError(fmt::format(
          "partition \"{}\": shards per client must be a whole number >= 1, got \"{}\"; {}", text,
          arg, kForms));
    }
    spec.shards_per_client = per;
    return spec;
  }
  if (head == "dirichlet") {
    spec.kind = PartitionKind::kDirichlet;
    double alpha = 0.0;
    const auto [end, ec] = std::from_chars(arg.data(), arg.data() + arg.size(), alpha);
    if (ec != std::errc() || end != arg.data() + arg.size() || !std::isfinite(alpha)) {
      throw ConfigError(fmt::format(
          "partition \"{}\": dirichlet needs a number alpha > 0 after the colon (dirichlet:0.1); "
          "{}",
          text, kForms));
    }
    if (alpha <= 0.0) {
      throw ConfigError(fmt::format(
          "partition \"{}\": alpha = {} must be > 0 (0.1: strongly non-IID, 100: nearly IID)", text,
          alpha));
    }
    spec.alpha = alpha;
    return spec;
  }
  throw ConfigError(fmt::format("partition \"{}\" is not a partition; {}", text, kForms));
}

std::string partition_name(const PartitionSpec& spec) {
  switch (spec.kind) {
    case PartitionKind::kIid: return "iid";
    case PartitionKind::kShards: return fmt::format("shards:{}", spec.shards_per_client);
    case PartitionKind::kDirichlet: return fmt::format("dirichlet:{}", spec.alpha);
  }
  return "?";
}

std::vector<std::int64_t> ClientPartition::sizes() const {
  std::vector<std::int64_t> out;
  out.reserve(clients.size());
  for (const auto& mine : clients) out.push_back(static_cast<std::int64_t>(mine.size()));
  return out;
}

double gamma_variate(double shape, Rng& rng) {
  DTRAIN_CHECK(shape > 0.0, "gamma shape {} must be > 0", shape);
  if (shape < 1.0) {
    // Gamma(a) = Gamma(a + 1) U^(1/a): the boost keeps Marsaglia-Tsang's d = a - 1/3 positive.
    const double boost = std::pow(open_uniform(rng), 1.0 / shape);
    return gamma_variate(shape + 1.0, rng) * boost;
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    const double x = rng.normal();
    const double v0 = 1.0 + c * x;
    if (v0 <= 0.0) continue;
    const double v = v0 * v0 * v0;
    const double u = open_uniform(rng);
    if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
  }
}

ClientPartition partition_clients(std::span<const std::int32_t> labels, std::int64_t classes,
                                  std::int64_t clients, const PartitionSpec& spec,
                                  std::uint64_t seed) {
  const auto n = static_cast<std::int64_t>(labels.size());
  if (clients < 1) {
    throw ConfigError(fmt::format("a partition needs at least one client, got {}", clients));
  }
  if (clients > n) {
    throw ConfigError(fmt::format(
        "{} clients but the training set has {} samples: each client needs at least one; use "
        "at most {} clients",
        clients, n, n));
  }
  for (const std::int32_t label : labels) {
    if (label < 0 || label >= classes) {
      throw DataError(
          fmt::format("partition: label {} is outside [0, {}) classes", label, classes));
    }
  }
  ClientPartition out;
  switch (spec.kind) {
    case PartitionKind::kIid: out = iid(n, clients, seed); break;
    case PartitionKind::kShards: out = shards(labels, clients, spec.shards_per_client, seed); break;
    case PartitionKind::kDirichlet: {
      for (int draw = 0;; ++draw) {
        out = dirichlet_once(labels, classes, clients, spec.alpha, seed, draw);
        const auto sizes = out.sizes();
        if (*std::min_element(sizes.begin(), sizes.end()) > 0) {
          out.redraws = draw;
          break;
        }
        if (draw + 1 >= kMaxRedraws) {
          throw ConfigError(fmt::format(
              "partition dirichlet:{} over {} clients left a client without samples in {} "
              "draws ({} samples); use a larger alpha or fewer clients",
              spec.alpha, clients, kMaxRedraws, n));
        }
      }
      break;
    }
  }
  for (auto& mine : out.clients) std::sort(mine.begin(), mine.end());
  return out;
}

std::vector<std::vector<std::int64_t>> label_histogram(const ClientPartition& partition,
                                                       std::span<const std::int32_t> labels,
                                                       std::int64_t classes) {
  std::vector<std::vector<std::int64_t>> histogram(
      partition.clients.size(), std::vector<std::int64_t>(static_cast<std::size_t>(classes), 0));
  for (std::size_t k = 0; k < partition.clients.size(); ++k) {
    for (const std::int64_t i : partition.clients[k]) {
      ++histogram[k][static_cast<std::size_t>(labels[static_cast<std::size_t>(i)])];
    }
  }
  return histogram;
}

}  // namespace dtrain::data
