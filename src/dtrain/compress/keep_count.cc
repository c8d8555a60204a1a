#include "dtrain/compress/keep_count.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace dtrain::compress {

std::int64_t KeepCount::of(std::int64_t n) const {
  if (n <= 0) return 0;
  const std::int64_t wanted = k > 0 ? k : std::llround(ratio * static_cast<double>(n));
  return std::clamp<std::int64_t>(wanted, 1, n);
}

std::string KeepCount::text() const {
  if (k > 0) return fmt::format("{}", k);
  // A fraction always reads as one ("1.0", not "1", which would parse back as a count).
  std::string text = fmt::format("{}", ratio);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

}  // namespace dtrain::compress
