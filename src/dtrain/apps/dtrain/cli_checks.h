// CLI11 validators whose messages say what is accepted. CLI11's own PositiveNumber prints its
// range as "0.000000 to 1797693134862315708145274237317043567981...", a 300-digit line that
// neither names the smallest accepted value nor rejects 0 in words.
#pragma once

#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <exception>
#include <string>

namespace dtrain::apps {

// A whole number >= min: "--workers: 0 is below 1, the smallest accepted value".
inline CLI::Validator at_least(std::int64_t min) {
  return CLI::Validator(
      [min](const std::string& text) -> std::string {
        std::size_t used = 0;
        long long value = 0;
        try {
          value = std::stoll(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != text.size()) {
          return fmt::format("'{}' is not a whole number (give one >= {})", text, min);
        }
        if (value < min) {
          return fmt::format("{} is below {}, the smallest accepted value", text, min);
        }
        return {};
      },
      fmt::format(">={}", min));
}

// A path that is not empty: `--out ""` would otherwise quietly mean the default folder.
inline CLI::Validator non_empty_path() {
  return CLI::Validator(
      [](const std::string& text) -> std::string {
        return text.empty() ? "an empty path; give a folder or file name, or leave the option out"
                            : "";
      },
      "PATH");
}

}  // namespace dtrain::apps
