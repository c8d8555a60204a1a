// Splitting short command-line and config texts ("1,2,4", "rank=2,slowdown=3").
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

// The pieces of `text` between occurrences of `separator`, empty ones included: "a,,b" -> {"a",
// "", "b"}, "" -> {""}. Callers decide whether an empty piece is an error.
inline std::vector<std::string> split(std::string_view text, char separator) {
  std::vector<std::string> pieces;
  for (;;) {
    const auto at = text.find(separator);
    pieces.emplace_back(text.substr(0, at));
    if (at == std::string_view::npos) return pieces;
    text.remove_prefix(at + 1);
  }
}

}  // namespace dtrain
