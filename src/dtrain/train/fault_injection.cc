#include "dtrain/train/fault_injection.h"

#include <fmt/format.h>

#include <charconv>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dtrain/base/error.h"
#include "dtrain/base/split.h"

namespace dtrain::train {
namespace {

std::int64_t parse_count(const std::string& text, const std::string& key, const std::string& all) {
  std::int64_t value = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < 0) {
    throw ConfigError(
        fmt::format("fault '{}': {} must be a count >= 0, got '{}'; the form is "
                    "rank=R,step=S",
                    all, key, text));
  }
  return value;
}

}  // namespace

FaultSpec parse_fault(const std::string& text) {
  FaultSpec spec;
  if (text.empty()) return spec;
  bool has_rank = false;
  bool has_step = false;
  for (const std::string& part : split(text, ',')) {
    const std::size_t eq = part.find('=');
    const std::string key = part.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : part.substr(eq + 1);
    if (key == "rank") {
      spec.rank = static_cast<int>(parse_count(value, key, text));
      has_rank = true;
    } else if (key == "step" && !has_step) {
      spec.step = parse_count(value, key, text);
      has_step = true;
    } else if (key == "every" && !has_step) {
      spec.every = parse_count(value, key, text);
      if (spec.every == 0) {
        throw ConfigError(fmt::format("fault '{}': every must be at least 1 step", text));
      }
      has_step = true;
    } else {
      throw ConfigError(fmt::format(
          "fault '{}': unknown or repeated key '{}'; the form is rank=R,step=S or rank=R,every=N",
          text, key));
    }
  }
  if (!has_rank || !has_step) {
    throw ConfigError(
        fmt::format("fault '{}' needs a rank and a step: rank=R,step=S or rank=R,every=N", text));
  }
  return spec;
}

void inject_fault(const FaultSpec& spec, int rank, std::int64_t step, bool process_rank,
                  const std::string& run_dir) {
  if (spec.rank != rank) return;
  if (spec.every > 0 ? step == 0 || step % spec.every != 0 : step != spec.step) return;
  const std::filesystem::path marker = std::filesystem::path(run_dir) / ".injected-fault";
  const std::string line = fmt::format("rank={},step={}", rank, step);
  {
    std::ifstream in(marker);
    std::string seen;
    while (std::getline(in, seen)) {
      if (seen == line) return;  // this run folder failed here once already
    }
  }
  std::ofstream(marker, std::ios::app) << line << "\n";
  if (process_rank) {
    std::fprintf(stderr,
                 "rank %d: injected fault after step %lld (parallel.inject_fault): "
                 "SIGKILL\n",
                 rank, static_cast<long long>(step));
    std::fflush(stderr);
    std::raise(SIGKILL);
  }
  throw Error(
      fmt::format("rank {}: injected fault after step {} (parallel.inject_fault)", rank, step));
}

}  // namespace dtrain::train
