#include "dtrain/aggregate/aggregator_spec.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <optional>

#include "dtrain/aggregate/bucketing.h"
#include "dtrain/aggregate/centered_clip.h"
#include "dtrain/aggregate/krum.h"
#include "dtrain/aggregate/mean.h"
#include "dtrain/aggregate/median.h"
#include "dtrain/aggregate/trimmed_mean.h"
#include "dtrain/base/error.h"

namespace dtrain::aggregate {
namespace {

constexpr double kDefaultTau = 10.0;

[[noreturn]] void reject(std::string_view spec, std::string_view why) {
  throw ConfigError(
      fmt::format("aggregator '{}': {}; accepted: {}", spec, why, accepted_aggregators()));
}

double parse_number(std::string_view spec, std::string_view value, std::string_view what) {
  double v = 0.0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (error != std::errc() || end != value.data() + value.size() || !std::isfinite(v)) {
    reject(spec, fmt::format("{} '{}' is not a number", what, value));
  }
  return v;
}

int parse_count(std::string_view spec, std::string_view value, std::string_view what) {
  int v = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (error != std::errc() || end != value.data() + value.size()) {
    reject(spec, fmt::format("{} '{}' is not an integer", what, value));
  }
  if (v < 1) reject(spec, fmt::format("{} {} must be >= 1", what, v));
  return v;
}

std::unique_ptr<Aggregator> parse(std::string_view whole, std::string_view spec, int byzantine,
                                  std::uint64_t seed) {
  const auto colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const bool has_value = colon != std::string_view::npos;
  const std::string_view value = has_value ? spec.substr(colon + 1) : std::string_view();
  if (name == "bucket") {
    const auto comma = value.find(',');
    if (comma == std::string_view::npos) {
      reject(whole, "bucket needs a size and an aggregator, as in bucket:2,median");
    }
    const int size = parse_count(whole, value.substr(0, comma), "bucket size");
    return std::make_unique<Bucketing>(size, parse(whole, value.substr(comma + 1), byzantine, seed),
                                       seed);
  }
  if (name == "mean" || name == "median" || name == "krum") {
    if (has_value) reject(whole, fmt::format("{} takes no parameter", name));
    if (name == "mean") return std::make_unique<Mean>();
    if (name == "median") return std::make_unique<Median>();
    return std::make_unique<Krum>(byzantine);
  }
  if (name == "trimmed") {
    if (!has_value) reject(whole, "trimmed needs beta, as in trimmed:0.2");
    const double beta = parse_number(whole, value, "beta");
    if (!(beta >= 0.0 && beta < 0.5)) reject(whole, fmt::format("beta {} outside [0, 0.5)", beta));
    return std::make_unique<TrimmedMean>(beta);
  }
  if (name == "multikrum") {
    return std::make_unique<Krum>(byzantine, has_value ? parse_count(whole, value, "m") : 0, true);
  }
  if (name == "cclip") {
    std::optional<double> tau = kDefaultTau;
    int iterations = 1;
    if (has_value) {
      const auto second = value.find(':');
      const std::string_view radius = value.substr(0, second);
      if (radius == "auto") {
        tau = std::nullopt;  // each iteration's lower median of the distances (centered_clip.h)
      } else {
        tau = parse_number(whole, radius, "tau");
        if (!(*tau > 0.0)) reject(whole, fmt::format("tau {} must be > 0", *tau));
      }
      if (second != std::string_view::npos) {
        iterations = parse_count(whole, value.substr(second + 1), "iterations");
      }
    }
    return std::make_unique<CenteredClip>(tau, iterations);
  }
  reject(whole, fmt::format("unknown aggregator '{}'", name));
}

}  // namespace

std::string accepted_aggregators() {
  return "mean, median, trimmed:<beta in [0, 0.5)>, krum, multikrum[:<m >= 1>], "
         "cclip[:<tau > 0 or auto>[:<iterations >= 1>]], each also as "
         "bucket:<s >= 1>,<aggregator>";
}

std::unique_ptr<Aggregator> parse_aggregator(std::string_view spec, int byzantine,
                                             std::uint64_t seed) {
  if (byzantine < 0) {
    throw ConfigError(
        fmt::format("aggregator '{}': {} Byzantine inputs: must be >= 0", spec, byzantine));
  }
  return parse(spec, spec, byzantine, seed);
}

}  // namespace dtrain::aggregate
