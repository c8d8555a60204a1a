// How many elements a sparsifying codec (top-k, random-k) keeps of a buffer of n: a fixed count k
// ("topk:1000": min(k, n)) or a fraction ("topk:0.01": round(ratio x n), at least 1). A bucket
// size is only known when the codec runs, so the codec carries the rule, not the number.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::compress {

struct KeepCount {
  double ratio = 0.0;  // in (0, 1] when the rule is a fraction, else 0
  std::int64_t k = 0;  // >= 1 when the rule is a count, else 0

  // Elements kept of n: 0 for n = 0, else in [1, n].
  std::int64_t of(std::int64_t n) const;
  // "0.01" or "1000", as the spec string writes it.
  std::string text() const;
};

}  // namespace dtrain::compress
