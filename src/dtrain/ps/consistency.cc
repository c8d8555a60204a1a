#include "dtrain/ps/consistency.h"

#include <fmt/format.h>

#include "dtrain/base/error.h"

namespace dtrain::ps {

std::string_view consistency_name(Consistency consistency) {
  switch (consistency) {
    case Consistency::kBsp: return "bsp";
    case Consistency::kAsync: return "async";
    case Consistency::kSsp: return "ssp";
  }
  return "?";
}

const std::vector<std::string>& consistency_names() {
  static const std::vector<std::string> names{"bsp", "async", "ssp"};
  return names;
}

Consistency parse_consistency(std::string_view name) {
  if (name == "bsp") return Consistency::kBsp;
  if (name == "async") return Consistency::kAsync;
  if (name == "ssp") return Consistency::kSsp;
  throw ConfigError(
      fmt::format("unknown parameter-server consistency \"{}\"; choose bsp, async or ssp", name));
}

}  // namespace dtrain::ps
