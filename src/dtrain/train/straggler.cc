#include "dtrain/train/straggler.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "dtrain/base/error.h"
#include "dtrain/base/rng.h"
#include "dtrain/base/split.h"

namespace dtrain::train {
namespace {

constexpr const char* kForms =
    "rank=R,slowdown=S (S >= 1), rank=R,delay_ms=D (D >= 0), random=exp,mean_ms=M or "
    "random=pareto,mean_ms=M[,alpha=A] "
    "(M > 0, A > 1), or empty";

[[noreturn]] void bad(const std::string& text, const std::string& why) {
  throw ConfigError(fmt::format("straggler spec '{}': {}; accepted: {}", text, why, kForms));
}

double number(const std::string& text, const std::string& key, const std::string& value) {
  try {
    std::size_t used = 0;
    const double x = std::stod(value, &used);
    if (used != value.size() || !std::isfinite(x)) throw std::invalid_argument(value);
    return x;
  } catch (const std::exception&) {
    bad(text, fmt::format("{}={} is not a number", key, value));
  }
}

}  // namespace

StragglerSpec parse_straggler(const std::string& text) {
  StragglerSpec spec;
  if (text.empty() || text == "none") return spec;
  std::map<std::string, std::string> fields;
  for (const std::string& item : split(text, ',')) {
    const auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
      bad(text, fmt::format("'{}' is not key=value", item));
    }
    if (!fields.emplace(item.substr(0, eq), item.substr(eq + 1)).second) {
      bad(text, fmt::format("'{}' is given twice", item.substr(0, eq)));
    }
  }
  auto take = [&](const std::string& key) -> std::string {
    const auto it = fields.find(key);
    if (it == fields.end()) bad(text, fmt::format("'{}' is missing", key));
    std::string value = it->second;
    fields.erase(it);
    return value;
  };
  if (fields.count("rank") != 0) {
    spec.kind = StragglerSpec::Kind::kSlowRank;
    const double rank = number(text, "rank", take("rank"));
    if (rank < 0 || rank != std::floor(rank)) bad(text, "rank must be an integer >= 0");
    spec.rank = static_cast<int>(rank);
    if (fields.count("slowdown") == 0 && fields.count("delay_ms") == 0) {
      bad(text, "rank= needs slowdown= or delay_ms=");
    }
    if (fields.count("slowdown") != 0) {
      spec.slowdown = number(text, "slowdown", take("slowdown"));
      if (spec.slowdown < 1.0) bad(text, "slowdown must be >= 1");
    }
    if (fields.count("delay_ms") != 0) {
      spec.delay_ms = number(text, "delay_ms", take("delay_ms"));
      if (spec.delay_ms < 0.0) bad(text, "delay_ms must be >= 0");
    }
  } else if (fields.count("random") != 0) {
    const std::string kind = take("random");
    if (kind == "exp") {
      spec.kind = StragglerSpec::Kind::kExponential;
    } else if (kind == "pareto") {
      spec.kind = StragglerSpec::Kind::kPareto;
      if (fields.count("alpha") != 0) spec.alpha = number(text, "alpha", take("alpha"));
      if (spec.alpha <= 1.0) bad(text, "alpha must be > 1 (the mean is infinite otherwise)");
    } else {
      bad(text, fmt::format("random={} is not exp or pareto", kind));
    }
    spec.mean_ms = number(text, "mean_ms", take("mean_ms"));
    if (spec.mean_ms <= 0.0) bad(text, "mean_ms must be > 0");
  } else {
    bad(text, "it names neither rank= nor random=");
  }
  if (!fields.empty()) bad(text, fmt::format("unknown key '{}'", fields.begin()->first));
  return spec;
}

void check_straggler_rank(const std::string& text, std::int64_t ranks) {
  const StragglerSpec spec = parse_straggler(text);
  if (spec.kind == StragglerSpec::Kind::kSlowRank && spec.rank >= ranks) {
    throw ConfigError(fmt::format(
        "parallel.straggler = \"{}\" slows rank {}, but this run has {} worker rank(s), 0 to {}; "
        "name one of them",
        text, spec.rank, ranks, ranks - 1));
  }
}

double straggler_delay_seconds(const StragglerSpec& spec, std::uint64_t seed, int rank,
                               std::int64_t step, double compute_seconds) {
  switch (spec.kind) {
    case StragglerSpec::Kind::kNone: return 0.0;
    case StragglerSpec::Kind::kSlowRank:
      return rank == spec.rank ? (spec.slowdown - 1.0) * compute_seconds + spec.delay_ms / 1e3
                               : 0.0;
    case StragglerSpec::Kind::kExponential:
    case StragglerSpec::Kind::kPareto: {
      // Stream: (rank, step) packed; a uniform u in (0, 1].
      Rng rng(seed ^ 0x5354524147474c52ULL,
              (static_cast<std::uint64_t>(rank) << 40) ^ static_cast<std::uint64_t>(step));
      const double u = 1.0 - static_cast<double>(rng.uniform());
      const double mean = spec.mean_ms / 1e3;
      if (spec.kind == StragglerSpec::Kind::kExponential) return -mean * std::log(u);
      // Pareto with shape alpha and scale x_m = mean (alpha - 1) / alpha: inverse CDF x_m u^(-1/a).
      const double scale = mean * (spec.alpha - 1.0) / spec.alpha;
      return scale * std::pow(u, -1.0 / spec.alpha);
    }
  }
  return 0.0;
}

}  // namespace dtrain::train
